#include "common/cli/suggestion.h"

#include <algorithm>

namespace trainmem::cli {

std::size_t edit_distance(std::string_view a, std::string_view b) {
  // d[i][j]: the distance between the first i letters of a and the first j of b.
  std::vector<std::vector<std::size_t>> d(a.size() + 1, std::vector<std::size_t>(b.size() + 1));
  for (std::size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (std::size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i)
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t substitution = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + substitution});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])  // two neighbours swapped
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  return d[a.size()][b.size()];
}

std::vector<std::string> nearest_names(std::string_view word, const std::vector<std::string>& names) {
  // A name the word begins, up to one of its dashes: the card or model without its size ("h100" is
  // h100-80gb, "rtx4090" is rtx4090-24gb). These come before any misspelling.
  std::vector<std::string> extended;
  for (const std::string& name : names)
    if (!word.empty() && name.size() > word.size() && name.compare(0, word.size(), word) == 0 && name[word.size()] == '-')
      extended.push_back(name);
  if (!extended.empty()) return extended;

  std::vector<std::string> nearest;
  std::size_t best = 0;
  for (const std::string& name : names) {
    const std::size_t near_enough = std::max<std::size_t>(1, std::max(word.size(), name.size()) / 3);
    // The distance is at least the difference in length: a long word (a command-line word can be
    // 128 KiB) is passed over without filling its table.
    const std::size_t shorter = std::min(word.size(), name.size()), longer = std::max(word.size(), name.size());
    if (longer - shorter > near_enough) continue;
    const std::size_t distance = edit_distance(word, name);
    if (distance == 0 || distance > near_enough) continue;
    if (nearest.empty() || distance < best) {
      nearest = {name};
      best = distance;
    } else if (distance == best && std::find(nearest.begin(), nearest.end(), name) == nearest.end()) {
      nearest.push_back(name);
    }
  }
  return nearest;
}

std::string did_you_mean(std::string_view word, const std::vector<std::string>& names) {
  const std::vector<std::string> nearest = nearest_names(word, names);
  if (nearest.empty()) return "";
  std::string text = "; did you mean ";
  for (std::size_t i = 0; i < nearest.size(); ++i)
    text += (i == 0 ? "" : i + 1 == nearest.size() ? " or " : ", ") + nearest[i];
  return text + "?";
}

}  // namespace trainmem::cli
