// The comparison behind rank agreement (common/comm/rank_agreement.h), without MPI: the digest,
// the serialization sent between ranks, the first setting that differs and the message naming it.
// The exchange itself runs under mpirun in suites/trainmem/tests/test_cli_ranks.cpp.
#include <gtest/gtest.h>

#include "common/comm/rank_agreement.h"

namespace trainmem {
namespace {

const Settings kRank0 = {{"the trainmem version", "0.1.0"}, {"--layers", "(default)"}, {"--steps", "3"}};

TEST(RankAgreement, SerializedSettingsParseBackToTheSameSettings) {
  const Settings with_empty_values = {{"--data", ""}, {"--steps", "3"}, {"", "x"}};
  for (const Settings& s : {kRank0, with_empty_values, Settings{}})
    EXPECT_EQ(parse_settings(serialize_settings(s)), s);
}

TEST(RankAgreement, TheDigestChangesWithAnyValueOrName) {
  const Settings other_value = {{"the trainmem version", "0.1.0"}, {"--layers", "(default)"}, {"--steps", "6"}};
  const Settings other_name = {{"the trainmem version", "0.1.0"}, {"--layers", "(default)"}, {"--step", "3"}};
  const std::uint64_t d = settings_digest(serialize_settings(kRank0));
  EXPECT_EQ(settings_digest(serialize_settings(kRank0)), d);
  EXPECT_NE(settings_digest(serialize_settings(other_value)), d);
  EXPECT_NE(settings_digest(serialize_settings(other_name)), d);
  // "ab"+"c" and "a"+"bc" concatenate alike; the separators keep them apart.
  EXPECT_NE(serialize_settings({{"ab", "c"}}), serialize_settings({{"a", "bc"}}));
}

TEST(RankAgreement, FirstDifferenceIsTheFirstIndexThatDiffers) {
  EXPECT_EQ(first_difference(kRank0, kRank0), std::nullopt);
  const Settings b = {{"the trainmem version", "0.1.0"}, {"--layers", "3"}, {"--steps", "6"}};
  EXPECT_EQ(first_difference(kRank0, b), 1u);
  EXPECT_EQ(first_difference(b, kRank0), 1u);
}

// Another build may have more or fewer flags: the end of the shorter list is a difference.
TEST(RankAgreement, ListsOfDifferentLengthsDifferWhereTheShorterEnds) {
  Settings longer = kRank0;
  longer.push_back({"--new-flag", "(default)"});
  EXPECT_EQ(first_difference(kRank0, longer), 3u);
  EXPECT_EQ(first_difference(longer, kRank0), 3u);
  EXPECT_EQ(first_difference(Settings{}, kRank0), 0u);
  EXPECT_EQ(setting_at(kRank0, 3), std::nullopt);
  EXPECT_EQ(setting_at(longer, 3), (Setting{"--new-flag", "(default)"}));
}

TEST(RankAgreement, TheMessageNamesTheSettingAndBothValues) {
  EXPECT_EQ(difference_message(Setting{"--steps", "3"}, 0, Setting{"--steps", "6"}, 1),
            "--steps is 3 on rank 0 but 6 on rank 1");
  EXPECT_EQ(difference_message(Setting{"--layers", "(default)"}, 0, Setting{"--layers", "3"}, 2),
            "--layers is (default) on rank 0 but 3 on rank 2");
}

TEST(RankAgreement, TheMessageNamesSettingsThatOnlyOneBuildHas) {
  EXPECT_EQ(difference_message(std::nullopt, 0, Setting{"--new-flag", "(default)"}, 1),
            "rank 0 has no such setting where rank 1 has --new-flag (different trainmem builds?)");
  EXPECT_EQ(difference_message(Setting{"--old", "1"}, 0, Setting{"--new", "1"}, 3),
            "rank 0 has --old where rank 3 has --new (different trainmem builds?)");
}

}  // namespace
}  // namespace trainmem
