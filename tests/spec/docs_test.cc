// docs/spec.md lists every TorchScript operation the translation reads, checked against the
// translator's own table: an op added to the code and not to the docs (or the other way) fails.
#include <fstream>
#include <sstream>

#include "absl/strings/str_join.h"
#include "cuir/spec/internal.h"
#include "gtest/gtest.h"

namespace cubridge::spec {
namespace {

// The ops as the docs show them: `aten::abs`, ... wrapped at 100 columns.
std::string OpsBlock() {
  std::string out, line;
  for (const std::string& op : internal::SupportedOperations()) {
    const std::string item = "`" + op + "`";
    if (!line.empty() && line.size() + item.size() + 2 > 100) {
      out += line + ",\n";
      line.clear();
    }
    line += (line.empty() ? "" : ", ") + item;
  }
  return out + line + "\n";
}

TEST(SpecDocs, OperationListMatchesTheTranslator) {
  std::ifstream in(std::string(CUBRIDGE_SOURCE_ROOT) + "/docs/spec.md");
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string doc = ss.str();
  const std::string begin = "<!-- ops:begin -->\n", end = "<!-- ops:end -->";
  const size_t a = doc.find(begin), b = doc.find(end);
  ASSERT_NE(a, std::string::npos);
  ASSERT_NE(b, std::string::npos);
  const std::string listed = doc.substr(a + begin.size(), b - a - begin.size());
  EXPECT_EQ(listed, OpsBlock()) << "paste between the markers of docs/spec.md:\n" << OpsBlock();
}

}  // namespace
}  // namespace cubridge::spec
