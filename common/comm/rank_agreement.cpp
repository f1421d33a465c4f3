#include "common/comm/rank_agreement.h"

#include <algorithm>
#include <limits>

#include "common/comm/communicator.h"
#if defined(TRAINMEM_WITH_MPI) && TRAINMEM_WITH_MPI
#include "common/comm/mpi_world.h"
#endif

namespace trainmem {

// --- the comparison

std::string serialize_settings(const Settings& settings) {
  std::string text;
  for (const Setting& s : settings) {
    text += s.name;
    text += '\0';
    text += s.value;
    text += '\0';
  }
  return text;
}

Settings parse_settings(const std::string& serialized) {
  std::vector<std::string> fields;
  std::size_t start = 0;
  for (std::size_t end; (end = serialized.find('\0', start)) != std::string::npos; start = end + 1)
    fields.push_back(serialized.substr(start, end - start));
  Settings settings;
  for (std::size_t i = 0; i + 1 < fields.size(); i += 2) settings.push_back({fields[i], fields[i + 1]});
  return settings;
}

std::uint64_t settings_digest(const std::string& serialized) {
  std::uint64_t hash = 14695981039346656037ull;  // FNV-1a's offset basis and prime
  for (const char c : serialized) {
    hash ^= static_cast<unsigned char>(c);
    hash *= 1099511628211ull;
  }
  return hash;
}

std::optional<std::size_t> first_difference(const Settings& a, const Settings& b) {
  const std::size_t common = std::min(a.size(), b.size());
  for (std::size_t i = 0; i < common; ++i)
    if (a[i] != b[i]) return i;
  if (a.size() != b.size()) return common;  // one list goes on where the other has ended
  return std::nullopt;
}

std::optional<Setting> setting_at(const Settings& settings, std::size_t index) {
  if (index >= settings.size()) return std::nullopt;
  return settings[index];
}

std::string difference_message(const std::optional<Setting>& a, int rank_a, const std::optional<Setting>& b, int rank_b) {
  std::string text;
  if (a && b && a->name == b->name) {
    text += a->name;
    text += " is ";
    text += a->value;
    text += " on rank ";
    text += std::to_string(rank_a);
    text += " but ";
    text += b->value;
    text += " on rank ";
    text += std::to_string(rank_b);
    return text;
  }
  // Not the same setting at the same place: the programs themselves differ.
  text += "rank ";
  text += std::to_string(rank_a);
  text += " has ";
  text += a ? a->name : std::string("no such setting");
  text += " where rank ";
  text += std::to_string(rank_b);
  text += " has ";
  text += b ? b->name : std::string("no such setting");
  text += " (different trainmem builds?)";
  return text;
}

// --- the exchange

#if defined(TRAINMEM_WITH_MPI) && TRAINMEM_WITH_MPI
namespace {

std::uint64_t all_reduce(std::uint64_t value, MPI_Op op) {
  std::uint64_t result = 0;
  check_mpi(MPI_Allreduce(&value, &result, 1, MPI_UINT64_T, op, MPI_COMM_WORLD), "MPI_Allreduce");
  return result;
}

// Rank 0's text on every rank: its length first, then its bytes.
std::string broadcast_from_rank0(std::string text) {
  std::uint64_t length = text.size();
  check_mpi(MPI_Bcast(&length, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD), "MPI_Bcast");
  text.resize(length);
  check_mpi(MPI_Bcast(text.data(), static_cast<int>(length), MPI_CHAR, 0, MPI_COMM_WORLD), "MPI_Bcast");
  return text;
}

// Every rank's text on every rank, in rank order: the lengths first, then the bytes.
std::vector<std::string> all_gather(const std::string& text, int world_size) {
  const int length = static_cast<int>(text.size());
  std::vector<int> lengths(static_cast<std::size_t>(world_size)), offsets(lengths.size(), 0);
  check_mpi(MPI_Allgather(&length, 1, MPI_INT, lengths.data(), 1, MPI_INT, MPI_COMM_WORLD), "MPI_Allgather");
  for (std::size_t r = 1; r < lengths.size(); ++r) offsets[r] = offsets[r - 1] + lengths[r - 1];
  std::string all(static_cast<std::size_t>(offsets.back() + lengths.back()), '\0');
  check_mpi(MPI_Allgatherv(text.data(), length, MPI_CHAR, all.data(), lengths.data(), offsets.data(), MPI_CHAR,
                           MPI_COMM_WORLD),
            "MPI_Allgatherv");
  std::vector<std::string> texts;
  for (std::size_t r = 0; r < lengths.size(); ++r)
    texts.push_back(all.substr(static_cast<std::size_t>(offsets[r]), static_cast<std::size_t>(lengths[r])));
  return texts;
}

}  // namespace
#endif

void require_same_settings_on_every_rank([[maybe_unused]] const Settings& mine) {
#if defined(TRAINMEM_WITH_MPI) && TRAINMEM_WITH_MPI
  if (!launched_by_mpirun()) return;
  ensure_mpi_initialized();
  const int rank = mpi_world_rank(), world_size = mpi_world_size();
  const std::string text = serialize_settings(mine);

  // 1. The usual case costs two 8-byte all-reduces: the same digest on every rank (min == max).
  const std::uint64_t digest = settings_digest(text);
  const std::uint64_t lowest = all_reduce(digest, MPI_MIN);
  const std::uint64_t highest = all_reduce(digest, MPI_MAX);
  if (lowest == highest) return;

  // 2. Some rank differs from rank 0. Each rank compares its settings with rank 0's; the smallest
  //    index any rank finds is the first setting that differs.
  const Settings reference = parse_settings(broadcast_from_rank0(text));
  constexpr std::uint64_t kNone = std::numeric_limits<std::uint64_t>::max();
  const std::optional<std::size_t> mine_differs = first_difference(reference, mine);
  const std::uint64_t first = all_reduce(mine_differs ? *mine_differs : kNone, MPI_MIN);
  if (first == kNone) return;  // only a digest collision gets here: the settings are the same

  // 3. Every rank's setting at that index (none where its list is shorter), to name a rank whose
  //    setting is not rank 0's.
  Settings at_first;
  if (const auto s = setting_at(mine, static_cast<std::size_t>(first))) at_first.push_back(*s);
  std::vector<std::optional<Setting>> values;
  for (const std::string& t : all_gather(serialize_settings(at_first), world_size))
    values.push_back(setting_at(parse_settings(t), 0));
  std::size_t other = 1;
  while (other + 1 < values.size() && values[other] == values[0]) ++other;

  std::string message = "the ranks were started with different settings: ";
  message += difference_message(values[0], 0, values[other], static_cast<int>(other));
  message += "; start every rank with the same flags";
  throw RanksDisagree(message, rank, world_size);
#endif
}

}  // namespace trainmem
