#include "frontends/expr/diagnostics.h"

#include <algorithm>

namespace fuse::expr {

void Diagnostics::error(Pos pos, std::string message) { errors_.push_back({loc(pos), std::move(message)}); }

std::vector<Diagnostic> Diagnostics::take() {
  // The parser and the lowering find errors in two sweeps; users read them in source order.
  std::stable_sort(errors_.begin(), errors_.end(), [](const Diagnostic& a, const Diagnostic& b) {
    return a.loc.line != b.loc.line ? a.loc.line < b.loc.line : a.loc.col < b.loc.col;
  });
  if (errors_.size() > kMaxErrors) errors_.resize(kMaxErrors);
  return std::move(errors_);
}

// Optimal string alignment distance: insertions, deletions, substitutions and swaps of two
// neighbours ('valeu' is one edit from 'value').
static size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    for (size_t j = 1; j <= b.size(); ++j) {
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (a[i - 1] != b[j - 1])});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  }
  return d[a.size()][b.size()];
}

std::string did_you_mean(std::string_view name, const std::vector<std::string_view>& candidates) {
  // A third of the name's length: 'sigmod' finds 'sigmoid', 'x' finds nothing.
  size_t best = std::max<size_t>(1, name.size() / 3) + 1;
  std::string_view found;
  if (name.size() > 64) return "";  // not a typo of anything; and keeps the cost bounded
  for (std::string_view c : candidates) {
    if (c == name || c.size() > name.size() + best || name.size() > c.size() + best) continue;
    size_t d = edit_distance(name, c);
    if (d < best && d < name.size()) {
      best = d;
      found = c;
    }
  }
  return found.empty() ? "" : "; did you mean '" + std::string(found) + "'?";
}

static std::string_view source_line(std::string_view source, int line) {
  size_t begin = 0;
  for (int l = 1; l < line; ++l) {
    size_t nl = source.find('\n', begin);
    if (nl == std::string_view::npos) return {};
    begin = nl + 1;
  }
  size_t end = std::min(source.find('\n', begin), source.size());
  std::string_view text = source.substr(begin, end - begin);
  if (!text.empty() && text.back() == '\r') text.remove_suffix(1);
  return text;
}

std::string format_diagnostics(const std::vector<Diagnostic>& errors, std::string_view source) {
  std::string out;
  for (const Diagnostic& d : errors) {
    out += d.loc.file + ":" + std::to_string(d.loc.line) + ":" + std::to_string(d.loc.col) +
           ": error: " + d.message + "\n";
    if (d.loc.line < 1) continue;
    std::string_view text = source_line(source, d.loc.line);
    out += std::string(text) + "\n";
    // Keep tabs so that the caret lines up under the column however tabs are displayed.
    std::string caret;
    for (int c = 1; c < d.loc.col; ++c)
      caret += static_cast<size_t>(c - 1) < text.size() && text[c - 1] == '\t' ? '\t' : ' ';
    out += caret + "^\n";
  }
  return out;
}

}  // namespace fuse::expr
