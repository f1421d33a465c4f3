# The flag fuzzer's dictionary (libFuzzer's format: one "quoted" entry a line), made at build time:
# every command and flag of trainmem as `trainmem flags` lists them, each flag also as "--flag="
# (its value in the same argument), then the values the flags take (flag_values.dict, committed).
#
#   cmake -DTRAINMEM=<trainmem binary> -DVALUES=<flag_values.dict> -DOUT=<flags.dict> -P flags_dict.cmake
execute_process(COMMAND "${TRAINMEM}" flags OUTPUT_VARIABLE listing RESULT_VARIABLE status)
if(NOT status EQUAL 0)
  message(FATAL_ERROR "'${TRAINMEM} flags' failed (${status})")
endif()
string(REPLACE "\n" ";" words "${listing}")
set(dictionary "# libFuzzer dictionary for fuzz_flags, made by suites/trainmem/fuzz/flags_dict.cmake: do not edit.\n")
foreach(word IN LISTS words)
  if(word STREQUAL "")
    continue()
  endif()
  string(APPEND dictionary "\"${word}\"\n")
  if(word MATCHES "^--")
    string(APPEND dictionary "\"${word}=\"\n")
  endif()
endforeach()
file(READ "${VALUES}" values)
string(APPEND dictionary "${values}")
file(WRITE "${OUT}" "${dictionary}")
