#include "common/stats_line.h"

#include <cctype>
#include <climits>

namespace sluice::tools {
namespace {

constexpr int kMaxDepth = 16;
constexpr std::size_t kMaxName = 128;

// A JSON reader of one line: just what a stats line needs, with every error kept (the first).
class Parser {
 public:
  explicit Parser(std::string_view s) : s_(s) {}
  const std::string& why() const { return why_; }
  bool fail(const std::string& why) {
    if (why_.empty()) why_ = why + " at byte " + std::to_string(i_ + 1);
    return false;
  }
  bool eat(char c) {
    space();
    if (i_ < s_.size() && s_[i_] == c) return ++i_, true;
    return false;
  }
  bool at_end() {
    space();
    return i_ == s_.size();
  }

  bool string(std::string* out);
  // A whole number, and with `minus` a leading '-' (rank, pid); false, saying nothing, when
  // there is none.
  bool whole(unsigned long long* out, bool* minus = nullptr);
  bool integer(long long* out);
  bool skip_value(int depth);
  // Calls member(key) at each member's value.
  template <class F>
  bool object(F&& member) {
    if (!eat('{')) return fail("an object expected");
    if (eat('}')) return true;
    do {
      std::string key;
      if (!string(&key)) return false;
      if (!eat(':')) return fail("':' expected");
      if (!member(key)) return false;
    } while (eat(','));
    return eat('}') || fail("',' or '}' expected");
  }

 private:
  void space() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\r')) ++i_;
  }
  std::size_t digits() {
    std::size_t start = i_;
    while (i_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[i_]))) ++i_;
    return i_ - start;
  }
  bool escape(std::string* out);

  std::string_view s_;
  std::size_t i_ = 0;
  std::string why_;
};

bool Parser::escape(std::string* out) {
  if (i_ >= s_.size()) return fail("a string without its closing quote");
  char e = s_[i_++];
  static constexpr std::string_view kFrom = "\"\\/bfnrt", kTo = "\"\\/\b\f\n\r\t";
  if (std::size_t k = kFrom.find(e); k != std::string_view::npos) return *out += kTo[k], true;
  if (e != 'u' || i_ + 4 > s_.size()) return fail("a bad escape in a string");
  unsigned v = 0;
  for (int k = 0; k < 4; ++k) {
    char h = s_[i_++];
    if (!std::isxdigit(static_cast<unsigned char>(h))) return fail("a bad \\u escape");
    v = v * 16 + static_cast<unsigned>(std::isdigit(static_cast<unsigned char>(h)) ? h - '0' : (h | 0x20) - 'a' + 10);
  }
  // UTF-8 (a surrogate half stays one character: nothing here needs more).
  if (v < 0x80) {
    *out += static_cast<char>(v);
  } else if (v < 0x800) {
    *out += static_cast<char>(0xc0 | (v >> 6));
    *out += static_cast<char>(0x80 | (v & 0x3f));
  } else {
    *out += static_cast<char>(0xe0 | (v >> 12));
    *out += static_cast<char>(0x80 | ((v >> 6) & 0x3f));
    *out += static_cast<char>(0x80 | (v & 0x3f));
  }
  return true;
}

bool Parser::string(std::string* out) {
  if (!eat('"')) return fail("a string expected");
  out->clear();
  while (i_ < s_.size()) {
    char c = s_[i_++];
    if (c == '"') return true;
    if (static_cast<unsigned char>(c) < 0x20) return fail("a control character in a string");
    if (c != '\\') *out += c;
    else if (!escape(out)) return false;
  }
  return fail("a string without its closing quote");
}

bool Parser::whole(unsigned long long* out, bool* minus) {
  space();
  if (minus != nullptr) {
    *minus = i_ < s_.size() && s_[i_] == '-';
    if (*minus) ++i_;
  }
  std::size_t start = i_;
  if (digits() == 0) return false;
  if (i_ < s_.size() && (s_[i_] == '.' || s_[i_] == 'e' || s_[i_] == 'E')) return false;
  unsigned long long v = 0;
  for (std::size_t k = start; k < i_; ++k) {
    unsigned d = static_cast<unsigned>(s_[k] - '0');
    if (v > (ULLONG_MAX - d) / 10) return false;
    v = v * 10 + d;
  }
  *out = v;
  return true;
}

bool Parser::integer(long long* out) {
  unsigned long long v = 0;
  bool minus = false;
  if (!whole(&v, &minus) || v > static_cast<unsigned long long>(LLONG_MAX)) return fail("a whole number expected");
  *out = minus ? -static_cast<long long>(v) : static_cast<long long>(v);
  return true;
}

bool Parser::skip_value(int depth) {
  if (depth > kMaxDepth) return fail("nested more than 16 deep");
  space();
  char c = i_ < s_.size() ? s_[i_] : '\0';
  if (c == '"') {
    std::string ignored;
    return string(&ignored);
  }
  if (c == '{') return object([&](const std::string&) { return skip_value(depth + 1); });
  if (c == '[') {
    ++i_;
    if (eat(']')) return true;
    do {
      if (!skip_value(depth + 1)) return false;
    } while (eat(','));
    return eat(']') || fail("',' or ']' expected");
  }
  for (std::string_view word : {"true", "false", "null"})
    if (s_.substr(i_, word.size()) == word) return i_ += word.size(), true;
  // -?digits(.digits)?([eE][+-]?digits)?
  if (c == '-') ++i_;
  if (digits() == 0) return fail("a value expected");
  if (i_ < s_.size() && s_[i_] == '.' && (++i_, digits() == 0)) return fail("a malformed number");
  if (i_ < s_.size() && (s_[i_] == 'e' || s_[i_] == 'E')) {
    ++i_;
    if (i_ < s_.size() && (s_[i_] == '+' || s_[i_] == '-')) ++i_;
    if (digits() == 0) return fail("a malformed number");
  }
  return true;
}

// Counter names are words of letters, digits and "._-" ("mem.recv.64K.hwm").
bool counter_name(const std::string& name) {
  if (name.empty() || name.size() > kMaxName) return false;
  for (char c : name)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' && c != '-') return false;
  return true;
}

}  // namespace

std::optional<StatsLine> parse_stats_line(std::string_view text, std::string* why) {
  Parser p(text);
  StatsLine out;
  bool has_counters = false;
  auto counter = [&](const std::string& name) {
    if (!counter_name(name)) return p.fail("a counter name that is not letters, digits and ._-");
    unsigned long long v = 0;
    if (!p.whole(&v)) return p.fail("counter " + name + " is not a whole number from 0 to 2^64-1");
    out.counters[name] = v;
    return true;
  };
  bool ok = p.object([&](const std::string& key) {
    if (key == "trigger") return p.string(&out.trigger);
    if (key == "host") return p.string(&out.host);
    if (key == "pid") return p.integer(&out.pid);
    if (key == "rank") return p.integer(&out.rank) && (out.rank >= 0 || p.fail("a negative rank"));
    if (key != "counters") return p.skip_value(1);
    has_counters = true;
    return p.object(counter);
  });
  if (ok && !p.at_end()) ok = p.fail("more after the line's object");
  if (ok && !has_counters) ok = p.fail("no \"counters\" object");
  if (!ok) {
    *why = p.why();
    return std::nullopt;
  }
  return out;
}

bool next_line(std::FILE* in, std::string* line, bool* too_long) {
  line->clear();
  *too_long = false;
  int c = getc_unlocked(in);
  if (c == EOF) return false;
  for (; c != EOF && c != '\n'; c = getc_unlocked(in)) {
    if (line->size() == kMaxStatsLine) {
      *too_long = true;  // the caller stops here: nothing more of it is read
      return true;
    }
    line->push_back(static_cast<char>(c));
  }
  return true;
}

}  // namespace sluice::tools
