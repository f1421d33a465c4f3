// The restricted pickle reader (restricted_pickle.h): the pickle machine's data opcodes only, as
// CPython's Unpickler runs them (Lib/pickle.py, "Pickle opcodes" and the load_* methods), into a
// graph of nodes in an arena (the memo's references kept as such), turned into JSON at the end.
#include "common/util/restricted_pickle.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <unordered_map>
#include <utility>
#include <vector>

namespace trainmem {

namespace {

// One Python object. The memo hands out the same node again.
struct Node {
  enum class Kind { none, boolean, integer, unsigned_integer, floating, string, bytes, list, tuple, dict, set };
  Kind kind = Kind::none;
  bool boolean = false;
  std::int64_t integer = 0;
  std::uint64_t unsigned_integer = 0;  // a non-negative int above INT64_MAX
  double floating = 0;
  std::string text;  // string (UTF-8) or bytes
  std::vector<Node*> items;                      // list, tuple, set
  std::vector<std::pair<Node*, Node*>> entries;  // dict
  bool on_path = false;          // on the path of expanded_size now: met again, it contains itself
  std::uint64_t expanded = 0;    // values in its JSON form, memo copies included (0: not counted yet)
};
// Nodes live in the reader's arena and point at each other by plain pointers: the memo can make a
// container hold itself (refused when turned into JSON), which reference counts would leak, and a
// chain of millions of nested lists is freed without recursion.
using NodePtr = Node*;

const char* kind_name(Node::Kind k) {
  switch (k) {
    case Node::Kind::none: return "None";
    case Node::Kind::boolean: return "a bool";
    case Node::Kind::integer:
    case Node::Kind::unsigned_integer: return "an int";
    case Node::Kind::floating: return "a float";
    case Node::Kind::string: return "a str";
    case Node::Kind::bytes: return "bytes";
    case Node::Kind::list: return "a list";
    case Node::Kind::tuple: return "a tuple";
    case Node::Kind::dict: return "a dict";
    case Node::Kind::set: return "a set";
  }
  return "an object";
}

// The opcodes a pickle may hold that this reader refuses because they import or call something.
const char* code_opcode_name(unsigned char op) {
  switch (op) {
    case 'c': return "GLOBAL";
    case 0x93: return "STACK_GLOBAL";
    case 'R': return "REDUCE";
    case 'b': return "BUILD";
    case 'i': return "INST";
    case 'o': return "OBJ";
    case 0x81: return "NEWOBJ";
    case 0x92: return "NEWOBJ_EX";
    case 0x82: return "EXT1";
    case 0x83: return "EXT2";
    case 0x84: return "EXT4";
    case 'P': return "PERSID";
    case 'Q': return "BINPERSID";
    case 0x97: return "NEXT_BUFFER";
    case 0x98: return "READONLY_BUFFER";
    default: return nullptr;
  }
}

// Protocol 0's text forms (a number or a string written as a line), which protocols 2-5 never write.
const char* text_opcode_name(unsigned char op) {
  switch (op) {
    case 'I': return "INT";
    case 'L': return "LONG";
    case 'F': return "FLOAT";
    case 'S': return "STRING";
    case 'V': return "UNICODE";
    case 'p': return "PUT";
    case 'g': return "GET";
    default: return nullptr;
  }
}

// Strict UTF-8: no overlong forms, no surrogates, nothing above U+10FFFF (what JSON text may hold).
bool valid_utf8(std::string_view s) {
  std::size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    std::size_t n = 0;
    std::uint32_t code = 0;
    if (c < 0x80) {
      ++i;
      continue;
    }
    if ((c & 0xE0) == 0xC0) n = 1, code = c & 0x1F;
    else if ((c & 0xF0) == 0xE0) n = 2, code = c & 0x0F;
    else if ((c & 0xF8) == 0xF0) n = 3, code = c & 0x07;
    else return false;
    if (i + n >= s.size()) return false;  // its continuation bytes are not all there
    for (std::size_t k = 1; k <= n; ++k) {
      const auto cc = static_cast<unsigned char>(s[i + k]);
      if ((cc & 0xC0) != 0x80) return false;
      code = (code << 6) | (cc & 0x3F);
    }
    const std::uint32_t smallest[] = {0, 0x80, 0x800, 0x10000};
    if (code < smallest[n] || code > 0x10FFFF || (code >= 0xD800 && code <= 0xDFFF)) return false;
    i += n + 1;
  }
  return true;
}

class Machine {
 public:
  Machine(std::string_view bytes, const std::string& source, const PickleLimits& limits)
      : in_(bytes), source_(source), limits_(limits) {}

  nlohmann::json run() {
    while (true) {
      op_at_ = pos_;
      const unsigned char op = take_byte();
      op_ = op;
      if (op == '.') {  // STOP
        if (stack_.empty()) fail("STOP with nothing on the stack");
        Node& result = *stack_.back();
        // Counted first, over the graph (each node once), so an expanding memo is refused before
        // anything of its expansion is built.
        const std::uint64_t values = expanded_size(result, 0);
        if (values > limits_.max_values)
          throw PickleError(source_ + ": expands to more than " + std::to_string(limits_.max_values) +
                            " values (the memo repeats objects)");
        return to_json(result);
      }
      step(op);
    }
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    std::string name = op_name(op_);
    throw PickleError(source_ + ": byte " + std::to_string(op_at_) + (name.empty() ? "" : " (" + name + ")") + ": " +
                      what);
  }
  static std::string op_name(int op) {
    if (op < 0) return "";
    static const std::unordered_map<int, const char*> names = {
        {'(', "MARK"}, {'0', "POP"}, {'1', "POP_MARK"}, {'2', "DUP"}, {'J', "BININT"}, {'K', "BININT1"},
        {'M', "BININT2"}, {'N', "NONE"}, {'G', "BINFLOAT"}, {'T', "BINSTRING"}, {'U', "SHORT_BINSTRING"},
        {'X', "BINUNICODE"}, {'a', "APPEND"}, {'d', "DICT"}, {'}', "EMPTY_DICT"}, {'e', "APPENDS"},
        {'h', "BINGET"}, {'j', "LONG_BINGET"}, {'l', "LIST"}, {']', "EMPTY_LIST"}, {'q', "BINPUT"},
        {'r', "LONG_BINPUT"}, {'s', "SETITEM"}, {'t', "TUPLE"}, {')', "EMPTY_TUPLE"}, {'u', "SETITEMS"},
        {0x80, "PROTO"}, {0x85, "TUPLE1"}, {0x86, "TUPLE2"}, {0x87, "TUPLE3"}, {0x88, "NEWTRUE"},
        {0x89, "NEWFALSE"}, {0x8a, "LONG1"}, {0x8b, "LONG4"}, {'B', "BINBYTES"}, {'C', "SHORT_BINBYTES"},
        {0x8c, "SHORT_BINUNICODE"}, {0x8d, "BINUNICODE8"}, {0x8e, "BINBYTES8"}, {0x8f, "EMPTY_SET"},
        {0x90, "ADDITEMS"}, {0x91, "FROZENSET"}, {0x94, "MEMOIZE"}, {0x95, "FRAME"}, {0x96, "BYTEARRAY8"},
        {'.', "STOP"}};
    if (auto it = names.find(op); it != names.end()) return it->second;
    if (const char* code = code_opcode_name(static_cast<unsigned char>(op))) return code;
    if (const char* text = text_opcode_name(static_cast<unsigned char>(op))) return text;
    return "";
  }

  // --- the input
  unsigned char take_byte() {
    if (pos_ >= in_.size()) {
      op_ = -1;
      fail(pos_ == 0 ? "empty: not a pickle" : "truncated: the input ends before STOP");
    }
    return static_cast<unsigned char>(in_[pos_++]);
  }
  std::string_view take(std::uint64_t n) {
    if (n > in_.size() - pos_)
      fail("truncated: needs " + std::to_string(n) + " bytes, " + std::to_string(in_.size() - pos_) + " are left");
    const std::string_view out = in_.substr(pos_, static_cast<std::size_t>(n));
    pos_ += static_cast<std::size_t>(n);
    return out;
  }
  std::uint64_t take_le(int bytes) {  // an unsigned little-endian number of 1, 2, 4 or 8 bytes
    const std::string_view b = take(static_cast<std::uint64_t>(bytes));
    std::uint64_t v = 0;
    for (int k = bytes - 1; k >= 0; --k) v = (v << 8) | static_cast<unsigned char>(b[static_cast<std::size_t>(k)]);
    return v;
  }

  NodePtr make(Node::Kind kind) {
    arena_.push_back(std::make_unique<Node>());
    arena_.back()->kind = kind;
    return arena_.back().get();
  }

  // --- the stack and the marks
  std::size_t frame_base() const { return marks_.empty() ? 0 : marks_.back(); }
  void push(NodePtr n) { stack_.push_back(n); }
  NodePtr pop() {
    if (stack_.size() <= frame_base()) fail("the stack is empty here");
    NodePtr n = stack_.back();
    stack_.pop_back();
    return n;
  }
  Node& top(Node::Kind kind, const char* what) {
    if (stack_.size() <= frame_base()) fail(std::string("needs ") + what + " on the stack, which is empty here");
    Node& n = *stack_.back();
    if (n.kind != kind) fail(std::string("needs ") + what + ", not " + kind_name(n.kind));
    return n;
  }
  std::vector<NodePtr> pop_mark() {  // the items since the last MARK, and the mark
    if (marks_.empty()) fail("no MARK before it");
    const std::size_t base = marks_.back();
    marks_.pop_back();
    std::vector<NodePtr> items(stack_.begin() + static_cast<std::ptrdiff_t>(base), stack_.end());
    stack_.resize(base);
    return items;
  }
  std::vector<NodePtr> pop_n(std::size_t n) {
    if (stack_.size() - frame_base() < n) fail("needs " + std::to_string(n) + " items on the stack");
    std::vector<NodePtr> items(stack_.end() - static_cast<std::ptrdiff_t>(n), stack_.end());
    stack_.resize(stack_.size() - n);
    return items;
  }
  void add_pairs(Node& dict, std::vector<NodePtr>& items) {
    if (items.size() % 2 != 0) fail("an odd number of items for a dict's keys and values");
    for (std::size_t k = 0; k < items.size(); k += 2) dict.entries.emplace_back(items[k], items[k + 1]);
  }

  // --- values
  void push_int(std::int64_t v) {
    NodePtr n = make(Node::Kind::integer);
    n->integer = v;
    push(n);
  }
  void push_text(Node::Kind kind, std::string_view text) {
    if (kind == Node::Kind::string && !valid_utf8(text)) fail("a string that is not valid UTF-8");
    NodePtr n = make(kind);
    n->text.assign(text);
    push(n);
  }
  // LONG1 / LONG4: n bytes, little-endian two's complement; up to 64 bits (9 bytes for an unsigned
  // value above INT64_MAX, as Python writes it: a last byte of 0 for the sign).
  void push_long(std::uint64_t n) {
    const std::string_view b = take(n);
    if (n == 0) return push_int(0);
    const bool negative = (static_cast<unsigned char>(b[n - 1]) & 0x80) != 0;
    std::size_t used = static_cast<std::size_t>(n);  // without the redundant sign bytes
    const unsigned char sign_byte = negative ? 0xFF : 0x00;
    while (used > 8 && static_cast<unsigned char>(b[used - 1]) == sign_byte) --used;
    std::uint64_t bits = 0;
    for (std::size_t k = std::min<std::size_t>(used, 8); k-- > 0;) bits = (bits << 8) | static_cast<unsigned char>(b[k]);
    if (used > 8) fail("an integer of more than 64 bits");
    if (used < 8 && negative) bits |= ~std::uint64_t{0} << (8 * used);  // sign-extend
    if (!negative && used == 8 && (bits >> 63) != 0) {
      NodePtr v = make(Node::Kind::unsigned_integer);
      v->unsigned_integer = bits;
      return push(v);
    }
    if (negative && used == 8 && (bits >> 63) == 0) fail("an integer of more than 64 bits");
    std::int64_t value;
    std::memcpy(&value, &bits, sizeof value);
    push_int(value);
  }

  void memo_put(std::uint64_t index) {
    if (stack_.size() <= frame_base()) fail("nothing on the stack to memoize");
    memo_[index] = stack_.back();
  }
  void memo_get(std::uint64_t index) {
    const auto it = memo_.find(index);
    if (it == memo_.end()) fail("memo entry " + std::to_string(index) + " was never stored");
    push(it->second);
  }

  void step(unsigned char op) {
    using K = Node::Kind;
    switch (op) {
      case 0x80: {  // PROTO
        const unsigned proto = take_byte();
        if (proto > 5) fail("protocol " + std::to_string(proto) + " is newer than this reader knows (0-5)");
        return;
      }
      case 0x95: {  // FRAME: a length prefix, for buffering; the opcodes follow inline
        const std::uint64_t n = take_le(8);
        if (n > in_.size() - pos_) fail("truncated: a frame of " + std::to_string(n) + " bytes, " +
                                        std::to_string(in_.size() - pos_) + " are left");
        return;
      }
      case '(': marks_.push_back(stack_.size()); return;  // MARK
      case '0':                                            // POP: an item, or a mark with none above it
        if (stack_.size() > frame_base()) stack_.pop_back();
        else if (!marks_.empty()) marks_.pop_back();
        else fail("the stack is empty here");
        return;
      case '1': pop_mark(); return;  // POP_MARK
      case '2': {                    // DUP
        if (stack_.size() <= frame_base()) fail("the stack is empty here");
        return push(stack_.back());
      }
      case 'N': return push(make(K::none));
      case 0x88:
      case 0x89: {  // NEWTRUE, NEWFALSE
        NodePtr n = make(K::boolean);
        n->boolean = op == 0x88;
        return push(n);
      }
      case 'J': {  // BININT: 4 bytes, signed
        const auto u = static_cast<std::uint32_t>(take_le(4));
        std::int32_t v;
        std::memcpy(&v, &u, sizeof v);
        return push_int(v);
      }
      case 'K': return push_int(static_cast<std::int64_t>(take_le(1)));  // BININT1
      case 'M': return push_int(static_cast<std::int64_t>(take_le(2)));  // BININT2
      case 0x8a: return push_long(take_le(1));                           // LONG1
      case 0x8b: {                                                       // LONG4: a signed length
        const auto u = static_cast<std::uint32_t>(take_le(4));
        if (u & 0x80000000u) fail("a negative length");
        return push_long(u);
      }
      case 'G': {  // BINFLOAT: 8 bytes, big-endian IEEE 754
        const std::string_view b = take(8);
        std::uint64_t bits = 0;
        for (char c : b) bits = (bits << 8) | static_cast<unsigned char>(c);
        NodePtr n = make(K::floating);
        std::memcpy(&n->floating, &bits, sizeof bits);
        return push(n);
      }
      // Python 2's str: read as Python 3 does by default (encoding ASCII), so only UTF-8 text here
      case 'U': return push_text(K::string, take(take_le(1)));  // SHORT_BINSTRING
      case 'T': {                                               // BINSTRING: a signed length
        const auto u = static_cast<std::uint32_t>(take_le(4));
        if (u & 0x80000000u) fail("a negative length");
        return push_text(K::string, take(u));
      }
      case 0x8c: return push_text(K::string, take(take_le(1)));  // SHORT_BINUNICODE
      case 'X': return push_text(K::string, take(take_le(4)));   // BINUNICODE
      case 0x8d: return push_text(K::string, take(take_le(8)));  // BINUNICODE8
      case 'C': return push_text(K::bytes, take(take_le(1)));    // SHORT_BINBYTES
      case 'B': return push_text(K::bytes, take(take_le(4)));    // BINBYTES
      case 0x8e:                                                 // BINBYTES8
      case 0x96: return push_text(K::bytes, take(take_le(8)));   // BYTEARRAY8
      case ']': return push(make(K::list));                      // EMPTY_LIST
      case ')': return push(make(K::tuple));                     // EMPTY_TUPLE
      case '}': return push(make(K::dict));                      // EMPTY_DICT
      case 0x8f: return push(make(K::set));                      // EMPTY_SET
      case 'a': {                                                // APPEND
        NodePtr item = pop();
        top(K::list, "a list").items.push_back(item);
        return;
      }
      case 'e': {  // APPENDS
        std::vector<NodePtr> items = pop_mark();
        Node& list = top(K::list, "a list");
        list.items.insert(list.items.end(), items.begin(), items.end());
        return;
      }
      case 0x90: {  // ADDITEMS
        std::vector<NodePtr> items = pop_mark();
        Node& set = top(K::set, "a set");
        set.items.insert(set.items.end(), items.begin(), items.end());
        return;
      }
      case 's': {  // SETITEM
        NodePtr value = pop();
        NodePtr key = pop();
        top(K::dict, "a dict").entries.emplace_back(key, value);
        return;
      }
      case 'u': {  // SETITEMS
        std::vector<NodePtr> items = pop_mark();
        return add_pairs(top(K::dict, "a dict"), items);
      }
      case 'l':
      case 't':
      case 0x91: {  // LIST, TUPLE, FROZENSET: the items since the mark
        NodePtr n = make(op == 'l' ? K::list : op == 't' ? K::tuple : K::set);
        n->items = pop_mark();
        return push(n);
      }
      case 'd': {  // DICT
        std::vector<NodePtr> items = pop_mark();
        NodePtr n = make(K::dict);
        add_pairs(*n, items);
        return push(n);
      }
      case 0x85:
      case 0x86:
      case 0x87: {  // TUPLE1..3
        NodePtr n = make(K::tuple);
        n->items = pop_n(static_cast<std::size_t>(op - 0x84));
        return push(n);
      }
      case 'q': return memo_put(take_le(1));            // BINPUT
      case 'r': return memo_put(take_le(4));            // LONG_BINPUT
      case 0x94: return memo_put(memo_.size());         // MEMOIZE: the next index
      case 'h': return memo_get(take_le(1));            // BINGET
      case 'j': return memo_get(take_le(4));            // LONG_BINGET
      default: break;
    }
    if (code_opcode_name(op)) fail("refused: it would import or call code, which this reader never does (data only)");
    if (text_opcode_name(op))
      fail("protocol 0's text form, which this reader does not read: dump with protocol 2 or later");
    char hex[8];
    std::snprintf(hex, sizeof hex, "0x%02x", static_cast<unsigned>(op));
    fail(std::string("opcode ") + hex + " is not a pickle opcode this reader knows");
  }

  // --- the result
  std::string key_text(const Node& k) const {
    switch (k.kind) {
      case Node::Kind::string: return k.text;
      case Node::Kind::integer: return std::to_string(k.integer);
      case Node::Kind::unsigned_integer: return std::to_string(k.unsigned_integer);
      case Node::Kind::boolean: return k.boolean ? "True" : "False";
      case Node::Kind::none: return "None";
      default: break;
    }
    throw PickleError(source_ + ": a dict key that is " + kind_name(k.kind) + " (JSON keys are strings)");
  }

  // The values of n's JSON form (saturating just above the limit), checking on the way that no
  // container holds itself, that nesting stays within the limit and that every dict key has a
  // JSON form. Each node is counted once (its count kept), so this is linear in the graph.
  std::uint64_t expanded_size(Node& n, std::size_t depth) const {
    using K = Node::Kind;
    if (n.kind != K::list && n.kind != K::tuple && n.kind != K::set && n.kind != K::dict) return 1;
    if (n.expanded != 0) return n.expanded;
    if (n.on_path) throw PickleError(source_ + ": " + kind_name(n.kind) + " that contains itself");
    if (depth >= limits_.max_depth)
      throw PickleError(source_ + ": nested more than " + std::to_string(limits_.max_depth) + " containers deep");
    n.on_path = true;
    const std::uint64_t cap = static_cast<std::uint64_t>(limits_.max_values) + 1;
    std::uint64_t total = 1;
    auto add = [&](Node& child) { total = std::min(cap, total + expanded_size(child, depth + 1)); };
    if (n.kind == K::dict) {
      for (auto& [k, v] : n.entries) {
        (void)key_text(*k);
        add(*v);
      }
    } else {
      for (NodePtr& item : n.items) add(*item);
    }
    n.on_path = false;
    n.expanded = total;
    return total;
  }

  // n as JSON (expanded_size has checked it: no cycle, within the limits).
  nlohmann::json to_json(const Node& n) const {
    using K = Node::Kind;
    switch (n.kind) {
      case K::none: return nullptr;
      case K::boolean: return n.boolean;
      case K::integer: return n.integer;
      case K::unsigned_integer: return n.unsigned_integer;
      case K::floating: return n.floating;
      case K::string: return n.text;
      case K::bytes: return nlohmann::json::binary(std::vector<std::uint8_t>(n.text.begin(), n.text.end()));
      default: break;
    }
    nlohmann::json out;
    if (n.kind == K::dict) {
      out = nlohmann::json::object();
      for (const auto& [k, v] : n.entries) out[key_text(*k)] = to_json(*v);
    } else {
      out = nlohmann::json::array();
      for (const NodePtr& item : n.items) out.push_back(to_json(*item));
    }
    return out;
  }

  std::string_view in_;
  const std::string& source_;
  const PickleLimits& limits_;
  std::size_t pos_ = 0, op_at_ = 0;
  int op_ = -1;
  std::vector<std::unique_ptr<Node>> arena_;  // every node made (one an opcode at most)
  std::vector<NodePtr> stack_;
  std::vector<std::size_t> marks_;  // stack sizes at each MARK
  std::unordered_map<std::uint64_t, NodePtr> memo_;
};

}  // namespace

nlohmann::json read_restricted_pickle(std::string_view bytes, const std::string& source, const PickleLimits& limits) {
  return Machine(bytes, source, limits).run();
}

nlohmann::json read_restricted_pickle_file(const std::string& path, const PickleLimits& limits) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw PickleError(path + ": cannot be opened");
  in.seekg(0, std::ios::end);
  const std::streamoff size = in.tellg();
  if (size < 0) throw PickleError(path + ": cannot be read");
  if (static_cast<std::uint64_t>(size) > limits.max_file_bytes)
    throw PickleError(path + ": " + std::to_string(size) + " bytes, more than the " +
                      std::to_string(limits.max_file_bytes) + " this reader takes");
  in.seekg(0);
  std::string bytes(static_cast<std::size_t>(size), '\0');
  if (!in.read(bytes.data(), size)) throw PickleError(path + ": cannot be read (it changed while being read?)");
  return read_restricted_pickle(bytes, path, limits);
}

bool looks_like_pickle(std::string_view bytes) {
  return bytes.size() >= 2 && static_cast<unsigned char>(bytes[0]) == 0x80 && static_cast<unsigned char>(bytes[1]) >= 2 &&
         static_cast<unsigned char>(bytes[1]) <= 5;
}

}  // namespace trainmem
