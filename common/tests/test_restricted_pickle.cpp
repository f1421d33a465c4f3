// The restricted pickle reader (common/util/restricted_pickle.h): every data opcode against the
// object Python builds from it (the bytes written by hand, as pickletools.dis shows them), every
// code opcode refused, and hostile, truncated and expanding inputs ending in one clear error.
#include "common/util/restricted_pickle.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

namespace trainmem {
namespace {

// Bytes from numbers and strings: P({0x80, 4}) + "abc" ...
std::string P(std::initializer_list<int> bytes) {
  std::string s;
  for (int b : bytes) s.push_back(static_cast<char>(b));
  return s;
}
const std::string kProto4 = P({0x80, 4});
// An expected value, written as JSON text (brace initializers of nlohmann::json read differently
// under GCC and clang when nested).
nlohmann::json J(const char* text) { return nlohmann::json::parse(text); }
const std::string kStop = ".";

nlohmann::json read(const std::string& body, const PickleLimits& limits = {}) {
  return read_restricted_pickle(kProto4 + body + kStop, "test.pickle", limits);
}

// The error's message (the test fails if nothing is thrown).
std::string error_of(const std::string& bytes, const PickleLimits& limits = {}) {
  try {
    read_restricted_pickle(bytes, "test.pickle", limits);
  } catch (const PickleError& e) {
    return e.what();
  }
  ADD_FAILURE() << "no PickleError";
  return "";
}

TEST(RestrictedPickle, ReadsTheScalars) {
  EXPECT_EQ(read("N"), nlohmann::json(nullptr));
  EXPECT_EQ(read(P({0x88})), true);
  EXPECT_EQ(read(P({0x89})), false);
  EXPECT_EQ(read(P({'K', 200})), 200);                      // BININT1
  EXPECT_EQ(read(P({'M', 0x34, 0x12})), 0x1234);            // BININT2
  EXPECT_EQ(read(P({'J', 0xfe, 0xff, 0xff, 0xff})), -2);    // BININT: signed
  EXPECT_EQ(read(P({0x8a, 0})), 0);                         // LONG1 of no bytes
  EXPECT_EQ(read(P({0x8a, 2, 0x00, 0x80})), -32768);        // LONG1: two's complement
  EXPECT_EQ(read(P({0x8a, 5, 0, 0, 0, 0, 1})), std::int64_t{1} << 32);
  // 2^63 as Python writes it: 9 bytes, the last a 0 for the sign
  EXPECT_EQ(read(P({0x8a, 9, 0, 0, 0, 0, 0, 0, 0, 0x80, 0})).get<std::uint64_t>(), std::uint64_t{1} << 63);
  EXPECT_EQ(read(P({0x8a, 8, 0, 0, 0, 0, 0, 0, 0, 0x80})).get<std::int64_t>(), INT64_MIN);
  EXPECT_EQ(read(P({0x8b, 3, 0, 0, 0, 0xff, 0xff, 0x7f})), 0x7fffff);  // LONG4
  // BINFLOAT: big-endian 1.5
  EXPECT_EQ(read(P({'G', 0x3f, 0xf8, 0, 0, 0, 0, 0, 0})), 1.5);
  EXPECT_EQ(read(P({0x8c, 3}) + "abc"), "abc");                                     // SHORT_BINUNICODE
  EXPECT_EQ(read(P({'X', 5, 0, 0, 0}) + "\xc3\xa9t\xc3\xa9"), "\xc3\xa9t\xc3\xa9");  // BINUNICODE, UTF-8
  EXPECT_EQ(read(P({0x8d, 2, 0, 0, 0, 0, 0, 0, 0}) + "hi"), "hi");                  // BINUNICODE8
  EXPECT_EQ(read(P({'U', 2}) + "py"), "py");                                        // SHORT_BINSTRING
  EXPECT_EQ(read(P({'T', 2, 0, 0, 0}) + "py"), "py");                               // BINSTRING
  const nlohmann::json bytes = read(P({'C', 3, 0, 0xff, 7}));                       // SHORT_BINBYTES
  ASSERT_TRUE(bytes.is_binary());
  const std::vector<std::uint8_t> held(bytes.get_binary().begin(), bytes.get_binary().end());
  EXPECT_EQ(held, (std::vector<std::uint8_t>{0, 0xff, 7}));
  EXPECT_TRUE(read(P({'B', 1, 0, 0, 0, 9})).is_binary());                           // BINBYTES
  EXPECT_TRUE(read(P({0x8e, 1, 0, 0, 0, 0, 0, 0, 0, 9})).is_binary());              // BINBYTES8
  EXPECT_TRUE(read(P({0x96, 1, 0, 0, 0, 0, 0, 0, 0, 9})).is_binary());              // BYTEARRAY8
}

TEST(RestrictedPickle, ReadsTheContainers) {
  // [1, 2, 3]: EMPTY_LIST, APPEND, MARK ... APPENDS
  EXPECT_EQ(read(P({']', 'K', 1, 'a', '(', 'K', 2, 'K', 3, 'e'})), J("[1, 2, 3]"));
  EXPECT_EQ(read(P({'(', 'K', 1, 'K', 2, 'l'})), J("[1, 2]"));            // LIST
  EXPECT_EQ(read(P({'(', 'K', 1, 'K', 2, 't'})), J("[1, 2]"));            // TUPLE: an array
  EXPECT_EQ(read(P({')'})), nlohmann::json::array());                                // EMPTY_TUPLE
  EXPECT_EQ(read(P({'K', 1, 0x85})), J("[1]"));                           // TUPLE1
  EXPECT_EQ(read(P({'K', 1, 'K', 2, 0x86})), J("[1, 2]"));                // TUPLE2
  EXPECT_EQ(read(P({'K', 1, 'K', 2, 'K', 3, 0x87})), J("[1, 2, 3]"));     // TUPLE3
  // {"a": 1, "b": 2}: EMPTY_DICT, SETITEM, MARK ... SETITEMS
  const nlohmann::json ab = {{"a", 1}, {"b", 2}};
  EXPECT_EQ(read(P({'}', 0x8c, 1, 'a', 'K', 1, 's'}) + P({'(', 0x8c, 1, 'b', 'K', 2, 'u'})), ab);
  EXPECT_EQ(read(P({'(', 0x8c, 1, 'a', 'K', 1, 0x8c, 1, 'b', 'K', 2, 'd'})), ab);   // DICT
  // keys that are ints, bools and None, written as Python prints them
  EXPECT_EQ(read(P({'}', '(', 'K', 7, 'N', 0x88, 'N', 'N', 'N', 'u'})),
            J(R"({"7": null, "True": null, "None": null})"));
  // a set and a frozenset: arrays
  EXPECT_EQ(read(P({0x8f, '(', 'K', 1, 'K', 2, 0x90})), J("[1, 2]"));     // EMPTY_SET, ADDITEMS
  EXPECT_EQ(read(P({'(', 'K', 1, 0x91})), J("[1]"));                      // FROZENSET
  // POP, POP_MARK, DUP
  EXPECT_EQ(read(P({'K', 1, 'K', 2, '0'})), 1);
  EXPECT_EQ(read(P({'K', 1, '(', 'K', 2, 'K', 3, '1'})), 1);
  EXPECT_EQ(read(P({'K', 4, '2', 0x86})), J("[4, 4]"));
  // A FRAME (protocol 4's length prefix) changes nothing.
  EXPECT_EQ(read(P({0x95, 2, 0, 0, 0, 0, 0, 0, 0, 'K', 5})), 5);
  // Protocols 2, 3 and 5 as well
  EXPECT_EQ(read_restricted_pickle(P({0x80, 2, 'K', 1, '.'})), 1);
  EXPECT_EQ(read_restricted_pickle(P({0x80, 5, 'K', 1, '.'})), 1);
}

TEST(RestrictedPickle, TheMemoGivesTheSameObjectAgainCopiedIntoEachPlace) {
  // x = [1]; [x, x] with BINPUT / BINGET, then with MEMOIZE and LONG_BINPUT / LONG_BINGET
  EXPECT_EQ(read(P({']', 'q', 0, 'K', 1, 'a', 'h', 0, 'h', 0, 0x86})), J("[[1], [1]]"));
  EXPECT_EQ(read(P({']', 0x94, 'K', 1, 'a', 'j', 0, 0, 0, 0, 'j', 0, 0, 0, 0, 0x86})), J("[[1], [1]]"));
  EXPECT_EQ(read(P({']', 'r', 9, 0, 0, 0, 'h', 9, 0x85})), J("[[]]"));
  // the memoized list filled after it was stored: the copies hold what it holds at the end
  EXPECT_EQ(read(P({']', 'q', 0, 'h', 0, 0x85, 'q', 1, '0', 'K', 2, 'a', '0', 'h', 1})), J("[[2]]"));
  // a list that contains itself has no JSON form
  EXPECT_NE(error_of(kProto4 + P({']', 'q', 0, 'h', 0, 'a', '.'})).find("a list that contains itself"), std::string::npos);
  EXPECT_NE(error_of(kProto4 + P({'h', 3, '.'})).find("memo entry 3 was never stored"), std::string::npos);
}

// Every opcode that imports or calls is refused by name, at its offset: nothing runs.
TEST(RestrictedPickle, RefusesEveryOpcodeThatWouldImportOrCall) {
  const std::map<int, std::string> code = {
      {'c', "GLOBAL"},   {0x93, "STACK_GLOBAL"}, {'R', "REDUCE"},   {'b', "BUILD"},   {'i', "INST"},
      {'o', "OBJ"},      {0x81, "NEWOBJ"},       {0x92, "NEWOBJ_EX"}, {0x82, "EXT1"}, {0x83, "EXT2"},
      {0x84, "EXT4"},    {'P', "PERSID"},        {'Q', "BINPERSID"}, {0x97, "NEXT_BUFFER"},
      {0x98, "READONLY_BUFFER"}};
  for (const auto& [op, name] : code) {
    const std::string message = error_of(kProto4 + P({'N', op}) + "xxxxxxxx.");
    EXPECT_NE(message.find("test.pickle: byte 3 (" + name + "): refused: it would import or call code"),
              std::string::npos)
        << message;
  }
}

// What `pickle.load` would turn into `os.system("touch MARKER")`, in protocol 0 (GLOBAL, REDUCE)
// and protocol 4 (STACK_GLOBAL, REDUCE): refused, and the marker file never appears.
TEST(RestrictedPickle, AHostilePickleIsRefusedAndNothingRuns) {
  const std::filesystem::path marker = std::filesystem::temp_directory_path() / "trainmem_pickle_ran_code";
  std::filesystem::remove(marker);
  const std::string command = "touch " + marker.string();
  const std::string protocol0 = "cos\nsystem\n(S'" + command + "'\ntR.";
  const std::string protocol4 = kProto4 + P({0x8c, 5}) + "posix" + P({0x94, 0x8c, 6}) + "system" + P({0x94, 0x93, 0x94}) +
                                P({0x8c, static_cast<int>(command.size())}) + command + P({0x94, 0x85, 0x94, 'R', 0x94, '.'});
  EXPECT_NE(error_of(protocol0).find("byte 0 (GLOBAL): refused"), std::string::npos);
  EXPECT_NE(error_of(protocol4).find("(STACK_GLOBAL): refused"), std::string::npos);
  EXPECT_FALSE(std::filesystem::exists(marker)) << "the pickle's command ran";
}

TEST(RestrictedPickle, MalformedInputsGetOneClearLine) {
  EXPECT_NE(error_of("").find("test.pickle: byte 0: empty: not a pickle"), std::string::npos);
  EXPECT_NE(error_of(P({0x80, 6, 'N', '.'})).find("protocol 6 is newer"), std::string::npos);
  EXPECT_NE(error_of(kProto4 + ".").find("STOP with nothing on the stack"), std::string::npos);
  EXPECT_NE(error_of(kProto4 + "a.").find("(APPEND): the stack is empty here"), std::string::npos);
  EXPECT_NE(error_of(kProto4 + P({'K', 1, 'K', 2, 'a', '.'})).find("needs a list, not an int"), std::string::npos);
  EXPECT_NE(error_of(kProto4 + "e.").find("(APPENDS): no MARK before it"), std::string::npos);
  EXPECT_NE(error_of(kProto4 + P({'(', 'K', 1, 'd', '.'})).find("an odd number of items"), std::string::npos);
  EXPECT_NE(error_of(kProto4 + P({'(', 'N', 0x85, 'N', 'd', '.'})).find("a dict key that is a tuple"), std::string::npos);
  EXPECT_NE(error_of(kProto4 + P({0x8c, 2, 0xed, 0xa0, '.'})).find("not valid UTF-8"), std::string::npos);  // a surrogate
  EXPECT_NE(error_of(kProto4 + P({0x8a, 10, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, '.'})).find("more than 64 bits"), std::string::npos);
  EXPECT_NE(error_of(kProto4 + "I1\n.").find("(INT): protocol 0's text form"), std::string::npos);
  EXPECT_NE(error_of(kProto4 + P({0xff})).find("opcode 0xff is not a pickle opcode"), std::string::npos);
  // a length beyond the input is refused before anything is allocated for it
  EXPECT_NE(error_of(kProto4 + P({0x8d, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f})).find("truncated: needs"),
            std::string::npos);
  EXPECT_NE(error_of(kProto4 + P({0x95, 0, 0, 0, 0, 1, 0, 0, 0})).find("truncated: a frame of"), std::string::npos);
  // every prefix of a good pickle is truncated, never read past its end
  const std::string good = kProto4 + P({'}', 0x94, '(', 0x8c, 1, 'a', ']', 'K', 1, 'a', 0x8c, 1, 'b', 'G', 0x3f, 0xf8, 0,
                                        0, 0, 0, 0, 0, 'u', '.'});
  EXPECT_EQ(read_restricted_pickle(good), J(R"({"a": [1], "b": 1.5})"));
  for (std::size_t n = 0; n + 1 < good.size(); ++n) {
    const std::string message = error_of(good.substr(0, n));
    EXPECT_TRUE(message.find("truncated") != std::string::npos || message.find("empty") != std::string::npos)
        << n << ": " << message;
  }
}

// The memo can make a few bytes stand for a huge object; nesting can be deep for little input.
TEST(RestrictedPickle, ExpansionAndDepthAreBounded) {
  // 40 levels of "a list holding the previous one twice": 2^40 values from 200 bytes
  std::string body = P({'N'});
  for (int level = 0; level < 40; ++level) body += P({'q', 0, 'h', 0, 0x86});
  EXPECT_NE(error_of(kProto4 + body + ".").find("expands to more than"), std::string::npos);
  // 300 nested lists against the default limit of 256; 100,000 (a chain whose recursive release
  // would overflow the stack): refused, no crash
  for (const std::size_t depth : {std::size_t{300}, std::size_t{100000}}) {
    std::string nested;
    for (std::size_t k = 0; k < depth; ++k) nested += "]";
    for (std::size_t k = 1; k < depth; ++k) nested += "a";
    EXPECT_NE(error_of(kProto4 + nested + ".").find("nested more than 256 containers deep"), std::string::npos);
  }
  PickleLimits small;
  small.max_values = 3;
  EXPECT_NE(error_of(kProto4 + P({'(', 'K', 1, 'K', 2, 'K', 3, 'l', '.'}), small).find("more than 3 values"),
            std::string::npos);
  EXPECT_EQ(read(P({'(', 'K', 1, 'K', 2, 'l'}), small), J("[1, 2]"));
}

TEST(RestrictedPickle, TellsAPickleFromJson) {
  EXPECT_TRUE(looks_like_pickle(P({0x80, 4, 0x95})));
  EXPECT_FALSE(looks_like_pickle("{\"segments\": []}"));
  EXPECT_FALSE(looks_like_pickle(P({0x80})));
  EXPECT_FALSE(looks_like_pickle(P({0x80, 9})));
}

// A real snapshot from someone else's GPU (common/tests/data/snapshots/README.md gives its figures,
// counted independently): its structure as PyTorch writes it.
TEST(RestrictedPickle, ReadsARealPyTorchSnapshot) {
  const nlohmann::json s =
      read_restricted_pickle_file(std::string(TRAINMEM_TEST_DATA_DIR) + "/snapshots/small-cnn-training.pickle");
  ASSERT_TRUE(s.is_object());
  ASSERT_EQ(s.at("device_traces").size(), 1u);
  const nlohmann::json& trace = s.at("device_traces").at(0);
  EXPECT_EQ(trace.size(), 5803u);
  std::map<std::string, std::size_t> actions;
  for (const nlohmann::json& e : trace) ++actions[e.at("action").get<std::string>()];
  EXPECT_EQ(actions, (std::map<std::string, std::size_t>{
                         {"alloc", 1935}, {"free_requested", 1926}, {"free_completed", 1926}, {"snapshot", 9},
                         {"segment_alloc", 7}}));
  EXPECT_EQ(s.at("segments").size(), 10u);
  std::size_t blocks = 0;
  for (const nlohmann::json& seg : s.at("segments")) blocks += seg.at("blocks").size();
  EXPECT_EQ(blocks, 54u);
  EXPECT_FALSE(s.contains("allocator_settings"));
  // the memo's frames, copied into every event that shares them
  EXPECT_GT(trace.at(0).at("frames").size(), 10u);
  EXPECT_TRUE(trace.at(0).at("frames").at(0).contains("filename"));
}

TEST(RestrictedPickle, AFileThatCannotBeReadOrIsTooLargeIsOneLine) {
  EXPECT_THROW(read_restricted_pickle_file("/nonexistent/run.pickle"), PickleError);
  PickleLimits tiny;
  tiny.max_file_bytes = 10;
  try {
    read_restricted_pickle_file(std::string(TRAINMEM_TEST_DATA_DIR) + "/snapshots/small-cnn-training.pickle", tiny);
    ADD_FAILURE() << "no PickleError";
  } catch (const PickleError& e) {
    EXPECT_NE(std::string(e.what()).find("more than the 10 this reader takes"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace trainmem
