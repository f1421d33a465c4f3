// A formula a suite's README states, read from the README itself so that a test can evaluate it
// with the numbers the code uses: the text a reader learns from cannot drift from the code.
//
// The README marks it as a fenced code block whose info string is `formula <name>`:
//
//   ```formula layer_saved_elements
//   ln1 BTC + ln1 mean/rstd 2BT + qkv 3BTC + ...
//   = 15·BTC + 4·BT + B·H·T²
//   ```
//
// Each side of an `=` is a sum (`+`) of terms; a term is any words followed by a monomial, its
// last word: an optional integer and one-letter symbols, each optionally squared or cubed, with or
// without `·` between them ("2BT", "B·H·T²", "16·BTC"). Every side is returned, so a test can check
// that the listed terms add up to the closed form and that both equal the code's figure.
#pragma once

#include <cstdint>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace trainmem::testing_support {

using FormulaSymbols = std::map<char, std::uint64_t>;

// One side of a formula: a sum of monomials, each a coefficient and its symbols (a symbol twice
// for a square).
struct FormulaSide {
  std::string text;
  std::vector<std::pair<std::uint64_t, std::string>> terms;

  std::uint64_t evaluate(const FormulaSymbols& values) const {
    std::uint64_t sum = 0;
    for (const auto& [coefficient, symbols] : terms) {
      std::uint64_t product = coefficient;
      for (char s : symbols) {
        const auto it = values.find(s);
        if (it == values.end()) throw std::invalid_argument(std::string("no value for symbol ") + s + " in " + text);
        product *= it->second;
      }
      sum += product;
    }
    return sum;
  }
};

// "2BT" -> {2, "BT"}, "B·H·T²" -> {1, "BHTT"}; throws for anything else.
inline std::pair<std::uint64_t, std::string> parse_monomial(const std::string& word) {
  std::uint64_t coefficient = 0;
  std::size_t i = 0;
  while (i < word.size() && word[i] >= '0' && word[i] <= '9') coefficient = coefficient * 10 + (word[i++] - '0');
  if (i == 0) coefficient = 1;
  std::string symbols;
  const std::string dot = "\xC2\xB7", square = "\xC2\xB2", cube = "\xC2\xB3";  // · ² ³ in UTF-8
  while (i < word.size()) {
    if (word.compare(i, dot.size(), dot) == 0) {
      i += dot.size();
    } else if (word.compare(i, square.size(), square) == 0 && !symbols.empty()) {
      symbols += symbols.back();
      i += square.size();
    } else if (word.compare(i, cube.size(), cube) == 0 && !symbols.empty()) {
      symbols += std::string(2, symbols.back());
      i += cube.size();
    } else if (word[i] >= 'A' && word[i] <= 'Z') {
      symbols += word[i++];
    } else {
      throw std::invalid_argument("not a monomial: '" + word + "'");
    }
  }
  return {coefficient, symbols};
}

inline FormulaSide parse_formula_side(const std::string& text) {
  FormulaSide side{text, {}};
  std::stringstream terms(text);
  std::string term;
  while (std::getline(terms, term, '+')) {
    std::stringstream words(term);
    std::string word, last;
    while (words >> word) last = word;
    if (last.empty()) throw std::invalid_argument("an empty term in '" + text + "'");
    side.terms.push_back(parse_monomial(last));
  }
  return side;
}

// Every side of the README's `formula <name>` block, in order; throws (naming the file and the
// formula) if the block is missing or a term is not a monomial.
inline std::vector<FormulaSide> readme_formula(const std::string& readme_path, const std::string& name) {
  std::ifstream in(readme_path);
  if (!in) throw std::runtime_error("cannot read " + readme_path);
  std::string line, body;
  bool inside = false, found = false;
  while (std::getline(in, line)) {
    if (!inside && line == "```formula " + name) {
      inside = found = true;
    } else if (inside && line.rfind("```", 0) == 0) {
      inside = false;
    } else if (inside) {
      body += line + " ";
    }
  }
  if (!found) throw std::runtime_error(readme_path + " has no ```formula " + name + " block");
  std::vector<FormulaSide> sides;
  std::size_t start = 0;
  for (std::size_t eq = body.find('='); ; eq = body.find('=', start)) {
    sides.push_back(parse_formula_side(body.substr(start, eq == std::string::npos ? std::string::npos : eq - start)));
    if (eq == std::string::npos) break;
    start = eq + 1;
  }
  return sides;
}

}  // namespace trainmem::testing_support
