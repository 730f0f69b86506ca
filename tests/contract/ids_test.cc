// The formats ids and keys are checked against before they reach Redis, and the UTF-8 check
// that names a bad byte's line and column.
#include "service/contract/ids.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace cubridge::contract {
namespace {

using ::testing::HasSubstr;

TEST(Ids, JobIdsAreJDashAndSixteenHexDigits) {
  EXPECT_TRUE(CheckJobId("j-0123456789abcdef").ok());
  for (const char* bad : {"j-0123456789abcdef:events", "j-0123456789ABCDEF", "j-123", "*",
                          "cubridge:job:j-0123456789abcdef", ""}) {
    const absl::Status s = CheckJobId(bad);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(s.message(), HasSubstr("j- and 16 hex digits")) << bad;
  }
  // An id that is not printable or too long is not echoed back.
  EXPECT_THAT(CheckJobId(std::string(1000, 'j')).message(), HasSubstr("(1000 bytes)"));
  EXPECT_THAT(CheckJobId(std::string("j-\x01\x02", 4)).message(), HasSubstr("(4 bytes)"));
}

TEST(Ids, SpecHashesWorkerIdsTaskIdsAndKeys) {
  EXPECT_TRUE(CheckSpecHash(std::string(64, 'a')).ok());
  EXPECT_FALSE(CheckSpecHash(std::string(64, 'a') + ":sm_80").ok());
  EXPECT_TRUE(CheckWorkerId("w-sm_90-00000000ab").ok());
  EXPECT_TRUE(CheckWorkerId("w-cpu-0123456789").ok());
  EXPECT_FALSE(CheckWorkerId("w-sm_90-00000000ab:x").ok());
  EXPECT_TRUE(CheckTaskId("lift-fa2_sm80-sm_80-ir-rules-1").ok());
  EXPECT_TRUE(CheckTaskId("cand-" + std::string(64, 'f') + "-sm_90-gpu-128x128w12s2-llm").ok());
  EXPECT_FALSE(CheckTaskId("transfer-abc:jobs").ok());
  EXPECT_FALSE(CheckTaskId("t-0123").ok());
  EXPECT_TRUE(CheckIdempotencyKey("sdk-0123abcd").ok());
  EXPECT_TRUE(CheckIdempotencyKey("team/nightly:2026-11-26@v1+x=y").ok());
  EXPECT_FALSE(CheckIdempotencyKey("").ok());
  EXPECT_FALSE(CheckIdempotencyKey("a b").ok());
  EXPECT_FALSE(CheckIdempotencyKey(std::string(257, 'k')).ok());
}

TEST(Utf8, WellFormedTextPassesAndEachMalformationIsFound) {
  EXPECT_EQ(FirstInvalidUtf8("plain ascii\n"), std::nullopt);
  EXPECT_EQ(FirstInvalidUtf8("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"), std::nullopt);
  EXPECT_EQ(FirstInvalidUtf8("ab\xff"), 2u);                  // never a UTF-8 byte
  EXPECT_EQ(FirstInvalidUtf8("a\xc3"), 1u);                   // truncated
  EXPECT_EQ(FirstInvalidUtf8("a\xc0\xaf"), 1u);               // overlong '/'
  EXPECT_EQ(FirstInvalidUtf8("\xed\xa0\x80"), 0u);            // a surrogate
  EXPECT_EQ(FirstInvalidUtf8("\xf4\x90\x80\x80"), 0u);        // past U+10FFFF
  EXPECT_EQ(FirstInvalidUtf8("\xe2\x28\xa1"), 0u);            // a bad continuation
}

TEST(Utf8, TheErrorNamesLineAndColumnInCharacters) {
  const absl::Status s = CheckUtf8("x = 1\n# caf\xc3\xa9 \xfe\n", "spec.py", "spec");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("spec.py:2:8: byte 0xfe is not UTF-8"));
}

}  // namespace
}  // namespace cubridge::contract
