# The manifests: how a technique, and a benchmark that ci/suite runs, declare themselves once.
#
# A suite's CMakeLists.txt (suites/<name>/, found by suites/CMakeLists.txt without a list) calls
#
#   trainmem_add_technique(NAME checkpointing          # its folder; Technique::name()
#     LIBRARY trainmem_checkpointing                   # the library holding its registration
#     REGISTRATION trainmem::checkpointing_technique   # a function returning const Technique&
#     HEADER checkpointing_technique.h                 # declares it (in the suite's folder)
#     ORDER 30                                         # its place in the progress line (and hook order among equals)
#     BENCHMARK bench_checkpointing                    # its Google Benchmark binary (optional)
#     FULL "--benchmark_min_time=0.1"                  # ci/suite's flags for it: the full run
#     QUICK "--benchmark_filter=L4/"                   #   and ci/suite --quick
#     RANKS "2 4" QUICK_RANKS "2")                     # world sizes it is also run at under mpirun
#
# and a benchmark that is not a technique's (bench_baseline, bench_collectives, ...) says how
# ci/suite runs it where it is built: trainmem_add_benchmark(NAME ... SUITE ORDER n FULL ... QUICK ...).
#
# From these the build generates everything that lists techniques (trainmem_generate_manifests,
# called by suites/CMakeLists.txt once every suite is added):
#   build/<preset>/generated/registered_techniques.cpp   the driver's registrations, in ORDER
#   TRAINMEM_TECHNIQUE_LIBRARIES (global property)        the libraries the driver links
#   build/<preset>/suites.json                            the catalog ci/suite, the report and the
#                                                         tests read (format: trainmem_write_catalog)

# JSON string of a CMake string.
function(_trainmem_json_string out value)
  string(REPLACE "\\" "\\\\" value "${value}")
  string(REPLACE "\"" "\\\"" value "${value}")
  string(REPLACE "\t" "\\t" value "${value}")
  string(REPLACE "\n" "\\n" value "${value}")
  set(${out} "\"${value}\"" PARENT_SCOPE)
endfunction()

# JSON string of a CMake string, or null when it is empty.
function(_trainmem_json_string_or_null out value)
  if(value STREQUAL "")
    set(${out} "null" PARENT_SCOPE)
  else()
    _trainmem_json_string(json "${value}")
    set(${out} "${json}" PARENT_SCOPE)
  endif()
endfunction()

# JSON array of integers from "2 4" (or a CMake list).
function(_trainmem_json_ints out value)
  string(REPLACE " " ";" value "${value}")
  list(REMOVE_ITEM value "")
  list(JOIN value ", " joined)
  set(${out} "[${joined}]" PARENT_SCOPE)
endfunction()

# One run-list entry (ci/suite): what trainmem_add_technique and trainmem_add_benchmark(SUITE) share.
# Entries are "<order, 6 digits>|<benchmark>|<json object>" in TRAINMEM_SUITE_RUNS.
function(_trainmem_add_suite_run order bench technique full quick ranks quick_ranks)
  if(NOT order MATCHES "^[0-9]+$")
    message(FATAL_ERROR "${bench}: ORDER must be a whole number, not '${order}'")
  endif()
  _trainmem_json_string(j_bench "${bench}")
  _trainmem_json_string(j_full "${full}")
  _trainmem_json_string(j_quick "${quick}")
  _trainmem_json_ints(j_ranks "${ranks}")
  _trainmem_json_ints(j_quick_ranks "${quick_ranks}")
  _trainmem_json_string_or_null(j_technique "${technique}")
  file(RELATIVE_PATH folder "${PROJECT_SOURCE_DIR}" "${CMAKE_CURRENT_SOURCE_DIR}")
  _trainmem_json_string(j_folder "${folder}")
  string(LENGTH "${order}" digits)
  math(EXPR pad "6 - ${digits}")
  string(REPEAT "0" ${pad} zeros)
  set(json "{\"name\": ${j_bench}, \"technique\": ${j_technique}, \"order\": ${order}, \"folder\": ${j_folder}, \"full\": ${j_full}, \"quick\": ${j_quick}, \"ranks\": ${j_ranks}, \"quick_ranks\": ${j_quick_ranks}}")
  set_property(GLOBAL APPEND PROPERTY TRAINMEM_SUITE_RUNS "${zeros}${order}|${bench}|${json}")
endfunction()

# Called by a benchmark's own CMake (trainmem_add_benchmark's SUITE option).
function(trainmem_declare_suite_run bench)
  cmake_parse_arguments(ARG "" "ORDER;FULL;QUICK;RANKS;QUICK_RANKS" "" ${ARGN})
  _trainmem_add_suite_run("${ARG_ORDER}" "${bench}" "" "${ARG_FULL}" "${ARG_QUICK}" "${ARG_RANKS}" "${ARG_QUICK_RANKS}")
endfunction()

function(trainmem_add_technique)
  cmake_parse_arguments(ARG "" "NAME;LIBRARY;REGISTRATION;HEADER;ORDER;BENCHMARK;FULL;QUICK;RANKS;QUICK_RANKS" "" ${ARGN})
  foreach(required NAME LIBRARY REGISTRATION HEADER ORDER)
    if(NOT DEFINED ARG_${required} OR ARG_${required} STREQUAL "")
      message(FATAL_ERROR "trainmem_add_technique in ${CMAKE_CURRENT_SOURCE_DIR}: ${required} is required")
    endif()
  endforeach()
  if(ARG_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "trainmem_add_technique(${ARG_NAME}): unknown arguments ${ARG_UNPARSED_ARGUMENTS}")
  endif()
  if(NOT ARG_ORDER MATCHES "^[0-9]+$")
    message(FATAL_ERROR "trainmem_add_technique(${ARG_NAME}): ORDER must be a whole number, not '${ARG_ORDER}'")
  endif()
  get_property(names GLOBAL PROPERTY TRAINMEM_TECHNIQUE_NAMES)
  if(ARG_NAME IN_LIST names)
    message(FATAL_ERROR "trainmem_add_technique: the technique '${ARG_NAME}' is declared twice")
  endif()
  set_property(GLOBAL APPEND PROPERTY TRAINMEM_TECHNIQUE_NAMES "${ARG_NAME}")
  if(NOT EXISTS "${CMAKE_CURRENT_SOURCE_DIR}/${ARG_HEADER}")
    message(FATAL_ERROR "trainmem_add_technique(${ARG_NAME}): no header ${CMAKE_CURRENT_SOURCE_DIR}/${ARG_HEADER}")
  endif()
  file(RELATIVE_PATH folder "${PROJECT_SOURCE_DIR}" "${CMAKE_CURRENT_SOURCE_DIR}")
  string(LENGTH "${ARG_ORDER}" digits)
  math(EXPR pad "6 - ${digits}")
  string(REPEAT "0" ${pad} zeros)
  # "<order>|<name>|<library>|<registration>|<header include path>|<benchmark>|<folder>"
  set_property(GLOBAL APPEND PROPERTY TRAINMEM_TECHNIQUES
    "${zeros}${ARG_ORDER}|${ARG_NAME}|${ARG_LIBRARY}|${ARG_REGISTRATION}|${folder}/${ARG_HEADER}|${ARG_BENCHMARK}|${folder}")
  if(ARG_BENCHMARK)
    _trainmem_add_suite_run("${ARG_ORDER}" "${ARG_BENCHMARK}" "${ARG_NAME}" "${ARG_FULL}" "${ARG_QUICK}" "${ARG_RANKS}"
                            "${ARG_QUICK_RANKS}")
  endif()
endfunction()

# The techniques, sorted by ORDER (then name): a list of "<order>|<name>|<library>|...".
function(trainmem_techniques out)
  get_property(entries GLOBAL PROPERTY TRAINMEM_TECHNIQUES)
  list(SORT entries COMPARE NATURAL)
  set(${out} "${entries}" PARENT_SCOPE)
endfunction()

# The libraries of every technique, in ORDER: what the driver links.
function(trainmem_technique_libraries out)
  trainmem_techniques(entries)
  set(libraries "")
  foreach(entry IN LISTS entries)
    string(REPLACE "|" ";" fields "${entry}")
    list(GET fields 2 library)
    list(APPEND libraries ${library})
  endforeach()
  set(${out} "${libraries}" PARENT_SCOPE)
endfunction()

# Writes the driver's registrations (a .cpp defining registered_techniques()) and sets `out` to its path.
function(trainmem_generate_registrations out)
  trainmem_techniques(entries)
  set(includes "")
  set(registrations "")
  foreach(entry IN LISTS entries)
    string(REPLACE "|" ";" fields "${entry}")
    list(GET fields 1 name)
    list(GET fields 3 registration)
    list(GET fields 4 header)
    string(APPEND includes "#include \"${header}\"\n")
    string(APPEND registrations "      &::${registration}(),  // ${name}\n")
  endforeach()
  set(path "${CMAKE_BINARY_DIR}/generated/registered_techniques.cpp")
  set(TRAINMEM_GENERATED_INCLUDES "${includes}")
  set(TRAINMEM_GENERATED_REGISTRATIONS "${registrations}")
  # file(CONFIGURE) rewrites the file only when its text changes: no rebuild on every configure.
  file(CONFIGURE OUTPUT "${path}" @ONLY CONTENT [=[
// Generated by cmake/TrainmemTechniques.cmake from the suites' manifests (suites/*/CMakeLists.txt,
// trainmem_add_technique): do not edit. A technique joins by its folder and its manifest.
#include "suites/trainmem/techniques.h"

@TRAINMEM_GENERATED_INCLUDES@
namespace trainmem {

// In the order the progress line names them (the manifests' ORDER); their strategies run in hook
// order (Technique::HookOrder), this order among equals.
const Techniques& registered_techniques() {
  static const Techniques techniques{
@TRAINMEM_GENERATED_REGISTRATIONS@  };
  return techniques;
}

}  // namespace trainmem
]=])
  set(${out} "${path}" PARENT_SCOPE)
endfunction()

# Writes build/<preset>/suites.json, the catalog:
#   {"techniques": [{"name", "order", "library", "registration", "benchmark" (or null), "folder", "readme"}, ...],
#    "benchmarks": [{"name", "technique" (or null), "order", "folder", "full", "quick", "ranks", "quick_ranks"}, ...]}
# techniques in ORDER; benchmarks in the order ci/suite runs them (ORDER, then name).
function(trainmem_write_catalog)
  trainmem_techniques(entries)
  set(techniques "")
  foreach(entry IN LISTS entries)
    string(REPLACE "|" ";" fields "${entry}")
    list(GET fields 0 order)
    math(EXPR order "${order}")  # without the padding
    list(GET fields 1 name)
    list(GET fields 2 library)
    list(GET fields 3 registration)
    list(GET fields 5 bench)
    list(GET fields 6 folder)
    _trainmem_json_string(j_name "${name}")
    _trainmem_json_string(j_library "${library}")
    _trainmem_json_string(j_registration "${registration}")
    _trainmem_json_string_or_null(j_bench "${bench}")
    _trainmem_json_string(j_folder "${folder}")
    set(j_readme "null")
    if(EXISTS "${PROJECT_SOURCE_DIR}/${folder}/README.md")
      _trainmem_json_string(j_readme "${folder}/README.md")
    endif()
    list(APPEND techniques "    {\"name\": ${j_name}, \"order\": ${order}, \"library\": ${j_library}, \"registration\": ${j_registration}, \"benchmark\": ${j_bench}, \"folder\": ${j_folder}, \"readme\": ${j_readme}}")
  endforeach()
  get_property(runs GLOBAL PROPERTY TRAINMEM_SUITE_RUNS)
  list(SORT runs COMPARE NATURAL)
  set(benchmarks "")
  foreach(run IN LISTS runs)
    string(FIND "${run}" "|{" at)
    math(EXPR at "${at} + 1")
    string(SUBSTRING "${run}" ${at} -1 json)
    list(APPEND benchmarks "    ${json}")
  endforeach()
  list(JOIN techniques ",\n" techniques)
  list(JOIN benchmarks ",\n" benchmarks)
  set(TRAINMEM_CATALOG_TECHNIQUES "${techniques}")
  set(TRAINMEM_CATALOG_BENCHMARKS "${benchmarks}")
  file(CONFIGURE OUTPUT "${CMAKE_BINARY_DIR}/suites.json" @ONLY CONTENT [=[
{
  "generated_by": "cmake/TrainmemTechniques.cmake from the suites' manifests",
  "techniques": [
@TRAINMEM_CATALOG_TECHNIQUES@
  ],
  "benchmarks": [
@TRAINMEM_CATALOG_BENCHMARKS@
  ]
}
]=])
endfunction()
