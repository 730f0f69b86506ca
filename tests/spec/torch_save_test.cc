// The torch-free reader of torch.save files (cuir/files/torch_save.h) against LibTorch's own
// loader: files PyTorch wrote (tests/spec/data/torch_save, written by its make_files.py), files
// LibTorch writes for random views, and files cut short, corrupted or crafted to lie.
#include "cuir/files/torch_save.h"

#include <torch/csrc/jit/serialization/pickle.h>
#include <torch/torch.h>

#include <filesystem>
#include <random>
#include <set>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "cuir/files/files.h"
#include "cuir/files/zip.h"
#include "cuir/spec/tensors.h"

namespace cubridge::files {
namespace {

namespace fs = std::filesystem;
using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;

std::string DataDir() { return std::string(CUBRIDGE_SOURCE_ROOT) + "/tests/spec/data/torch_save"; }

std::string Bytes(const std::vector<char>& v) { return std::string(v.begin(), v.end()); }

// What LibTorch's loader makes of the file, as the reader's kind of value.
cuir::TensorValue ByLibTorch(const std::string& bytes) {
  const torch::Tensor t =
      torch::pickle_load(std::vector<char>(bytes.begin(), bytes.end())).toTensor().contiguous();
  return {*spec::TensorDTypeOf(t.scalar_type()), t.sizes().vec(),
          std::string(static_cast<const char*>(t.data_ptr()), t.nbytes())};
}

void ExpectSame(const absl::StatusOr<cuir::TensorValue>& got, const cuir::TensorValue& want,
                const std::string& what) {
  ASSERT_TRUE(got.ok()) << what << ": " << got.status();
  EXPECT_EQ(got->dtype, want.dtype) << what;
  EXPECT_EQ(got->shape, want.shape) << what;
  EXPECT_TRUE(got->data == want.data) << what << ": the elements differ";
}

TEST(TorchSave, ReadsEveryFilePyTorchWroteAsLibTorchDoes) {
  std::set<cuir::TensorDType> dtypes;
  std::set<size_t> ranks;
  int files = 0;
  for (const auto& entry : fs::directory_iterator(DataDir() + "/good")) {
    const std::string path = entry.path().string();
    auto bytes = ReadFile(path);
    ASSERT_TRUE(bytes.ok()) << bytes.status();
    // LibTorch 1.13 reads protocol 2 only (what torch.save writes unless told otherwise): the
    // protocol 4 file holds arange(6).reshape(2, 3) as int64.
    const bool protocol4 = path.find("protocol4") != std::string::npos;
    const cuir::TensorValue want =
        ByLibTorch(protocol4 ? Bytes(torch::pickle_save(torch::arange(6, torch::kInt64).reshape({2, 3})))
                             : *bytes);
    ExpectSame(ReadTorchSaveFile(path), want, path);
    dtypes.insert(want.dtype);
    ranks.insert(want.shape.size());
    ++files;
  }
  // The fixtures cover what they claim to: every buffer dtype, ranks 0 to 4.
  EXPECT_GE(files, 17);
  EXPECT_EQ(dtypes.size(), static_cast<size_t>(cuir::kTensorDTypeCount));
  EXPECT_EQ(ranks, (std::set<size_t>{0, 1, 2, 3, 4}));
}

// Views LibTorch saves as they are (storage, offset, strides): random ranks, sizes (0 too),
// strides (broadcast 0, transposed, stepped) and offsets into a larger storage, every dtype.
TEST(TorchSave, ReadsRandomViewsAsLibTorchDoes) {
  std::mt19937 rng(11);
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  for (int c = 0; c < 300; ++c) {
    const auto dtype = static_cast<cuir::TensorDType>(c % cuir::kTensorDTypeCount);
    const int rank = pick(0, 4);
    std::vector<int64_t> sizes, strides;
    int64_t reach = 0;
    for (int d = 0; d < rank; ++d) {
      sizes.push_back(pick(0, 4));
      strides.push_back(pick(0, 7));
      reach += std::max<int64_t>(sizes.back() - 1, 0) * strides.back();
    }
    const int64_t offset = pick(0, 5);
    torch::Tensor base = torch::randint(0, 2, {offset + reach + 1 + pick(0, 3)}, torch::kInt64);
    base = dtype == cuir::TensorDType::kBool ? base.to(torch::kBool)
                                             : (base * 37 - 11).to(spec::TorchDType(dtype));
    const torch::Tensor view = base.as_strided(sizes, strides, offset);
    const std::string bytes = Bytes(torch::pickle_save(view));
    const std::string what = absl::StrCat("case ", c, ": ", cuir::TensorDTypeName(dtype), " sizes [",
                                          absl::StrJoin(sizes, ","), "] strides [",
                                          absl::StrJoin(strides, ","), "] offset ", offset);
    ExpectSame(ParseTorchSave(bytes, "view.pt"), ByLibTorch(bytes), what);
  }
}

TEST(TorchSave, RefusesFilesThatAreNotOneTensorOfABufferDtype) {
  const std::string bad = DataDir() + "/bad/";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"float64", "a tensor stored as torch.DoubleStorage"},
      {"uint8", "a tensor stored as torch.ByteStorage"},
      {"dict", "a list, dict or object"},
      {"two_tensors", "the file holds a tuple, not a tensor"},
      {"parameter", "torch.save(p.detach(), path)"},
      {"rank5", "rank 5"},
      {"legacy", "_use_new_zipfile_serialization=False"},
      {"int", "the file holds an int, not a tensor"},
  };
  for (const auto& [name, why] : cases) {
    auto r = ReadTorchSaveFile(bad + name + ".pt");
    ASSERT_FALSE(r.ok()) << name;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << name;
    EXPECT_THAT(std::string(r.status().message()),
                AllOf(HasSubstr(bad + name + ".pt: "), HasSubstr(why), HasSubstr("torch.save(")))
        << name;
  }
  // A refusal that names its own fix does not get the general advice as well.
  for (const char* name : {"float64", "parameter"}) {
    EXPECT_THAT(std::string(ReadTorchSaveFile(bad + name + ".pt").status().message()),
                Not(HasSubstr("PyTorch 1.6 or later")))
        << name;
  }
  EXPECT_EQ(ReadTorchSaveFile(bad + "missing.pt").status().code(), absl::StatusCode::kNotFound);
}

TEST(TorchSave, RefusesMoreElementsThanTheCallerTakesBeforeGatheringThem) {
  // int64_r1_offset: 12 elements of a 40-element storage. A spec's buffers take 2^31
  // (cuir/spec/tensors.cc); a full [B, H, S, S] bias at S = 8k would be 2^32.
  const std::string path = DataDir() + "/good/int64_r1_offset.pt";
  TorchSaveOptions options;
  options.max_elements = 12;
  ASSERT_TRUE(ReadTorchSaveFile(path, options).ok());
  options.max_elements = 11;
  auto r = ReadTorchSaveFile(path, options);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(r.status().message()),
              AllOf(HasSubstr(path + ": the tensor has 12 elements, more than 11"),
                    HasSubstr("save a smaller tensor"), Not(HasSubstr("PyTorch 1.6 or later"))));
}

std::string GoodFile(const std::string& name) {
  auto bytes = ReadFile(DataDir() + "/good/" + name + ".pt");
  EXPECT_TRUE(bytes.ok()) << bytes.status();
  return bytes.ok() ? *bytes : "";
}

TEST(TorchSave, EveryTruncationIsACleanError) {
  for (const char* name : {"float32_r4_permuted", "int64_r2_protocol4"}) {
    const std::string full = GoodFile(name);
    for (size_t n = 0; n < full.size(); ++n) {
      auto r = ParseTorchSave(full.substr(0, n), "cut.pt");
      ASSERT_FALSE(r.ok()) << name << " cut to " << n << " bytes";
      EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
      EXPECT_THAT(std::string(r.status().message()),
                  AllOf(HasSubstr("cut.pt: "), HasSubstr("save one tensor with torch.save(t, path)")))
          << n;
    }
  }
}

// A flipped byte is refused (the CRC, the directory's checks) or falls where nothing is read (the
// headers' padding, the version entry): never a different tensor. Without the CRC check the
// pickle's and storage's bytes reach the parser: any answer, no crash.
TEST(TorchSave, EveryFlippedByteIsRefusedOrChangesNothing) {
  for (const char* name : {"float16_r2_offset", "bool_r2", "int32_r4_broadcast"}) {
    const std::string full = GoodFile(name);
    const cuir::TensorValue want = ByLibTorch(full);
    int refused = 0;
    for (size_t i = 0; i < full.size(); ++i) {
      std::string bad = full;
      bad[i] = static_cast<char>(bad[i] ^ 0x5a);
      auto r = ParseTorchSave(bad, "flip.pt");
      if (r.ok()) {
        ExpectSame(r, want, absl::StrCat(name, " byte ", i));
      } else {
        ++refused;
        EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
      }
      TorchSaveOptions no_crc;
      no_crc.check_crc = false;
      (void)ParseTorchSave(bad, "flip.pt", no_crc);
    }
    EXPECT_GT(refused, static_cast<int>(full.size()) / 3) << name;
  }
}

// Hand-made archives and pickles, to say each lie a file may tell.
void Le(std::string& out, uint64_t v, int n) {
  for (int i = 0; i < n; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

struct Entry {
  std::string name, data;
  int method = 0;
  bool bad_crc = false;
};

// A zip archive of stored entries; with `zip64`, the directory's sizes and offsets sit in zip64
// extra fields and records, as an archive over 4 GiB has them.
std::string Zip(const std::vector<Entry>& entries, bool zip64 = false) {
  std::string out, dir;
  for (const Entry& e : entries) {
    const uint64_t offset = out.size();
    const uint32_t crc = Crc32(e.data) ^ (e.bad_crc ? 1u : 0u);
    Le(out, 0x04034b50, 4), Le(out, 20, 2), Le(out, 0, 2), Le(out, e.method, 2), Le(out, 0, 4);
    Le(out, crc, 4), Le(out, e.data.size(), 4), Le(out, e.data.size(), 4);
    Le(out, e.name.size(), 2), Le(out, 0, 2);
    out += e.name + e.data;
    const uint64_t big = 0xffffffff;
    Le(dir, 0x02014b50, 4), Le(dir, 45, 2), Le(dir, 45, 2), Le(dir, 0, 2), Le(dir, e.method, 2);
    Le(dir, 0, 4), Le(dir, crc, 4);
    Le(dir, zip64 ? big : e.data.size(), 4), Le(dir, zip64 ? big : e.data.size(), 4);
    Le(dir, e.name.size(), 2), Le(dir, zip64 ? 28 : 0, 2), Le(dir, 0, 2), Le(dir, 0, 2), Le(dir, 0, 2);
    Le(dir, 0, 4), Le(dir, zip64 ? big : offset, 4);
    dir += e.name;
    if (zip64) Le(dir, 1, 2), Le(dir, 24, 2), Le(dir, e.data.size(), 8), Le(dir, e.data.size(), 8), Le(dir, offset, 8);
  }
  const uint64_t dir_offset = out.size();
  out += dir;
  if (zip64) {
    const uint64_t end64 = out.size();
    Le(out, 0x06064b50, 4), Le(out, 44, 8), Le(out, 45, 2), Le(out, 45, 2), Le(out, 0, 4), Le(out, 0, 4);
    Le(out, entries.size(), 8), Le(out, entries.size(), 8), Le(out, dir.size(), 8), Le(out, dir_offset, 8);
    Le(out, 0x07064b50, 4), Le(out, 0, 4), Le(out, end64, 8), Le(out, 1, 4);
  }
  Le(out, 0x06054b50, 4), Le(out, 0, 2), Le(out, 0, 2);
  Le(out, zip64 ? 0xffff : entries.size(), 2), Le(out, zip64 ? 0xffff : entries.size(), 2);
  Le(out, zip64 ? 0xffffffff : dir.size(), 4), Le(out, zip64 ? 0xffffffff : dir_offset, 4), Le(out, 0, 2);
  return out;
}

std::string Str(const std::string& s) {
  std::string out = "X";
  Le(out, s.size(), 4);
  return out + s;
}
std::string Long(int64_t v) {  // LONG1 of 8 bytes: any int64, negative ones too
  std::string out = "\x8a\x08";
  Le(out, static_cast<uint64_t>(v), 8);
  return out;
}
std::string Ints(const std::vector<int64_t>& v) {
  std::string out = "(";
  for (int64_t x : v) out += Long(x);
  return out + "t";
}

struct Crafted {
  std::string storage = "FloatStorage";
  int64_t numel = 6, offset = 0;
  std::vector<int64_t> sizes = {2, 3}, strides = {3, 1};
  std::string storage_bytes = std::string(24, '\0');
  std::string extra_opcodes;  // before STOP: what the pickle is made to do besides
};

std::string Pickle(const Crafted& c) {
  return absl::StrCat("\x80\x02", "ctorch._utils\n_rebuild_tensor_v2\n", "((", Str("storage"),
                      "ctorch\n", c.storage, "\n", Str("0"), Str("cpu"), Long(c.numel), "tQ",
                      Long(c.offset), Ints(c.sizes), Ints(c.strides), "\x89",
                      "ccollections\nOrderedDict\n)Rt", "R", c.extra_opcodes, ".");
}

std::string Archive(const Crafted& c) {
  return Zip({{"t/data.pkl", Pickle(c)}, {"t/data/0", c.storage_bytes}, {"t/version", "3\n"}});
}

absl::Status Parsed(const std::string& bytes) { return ParseTorchSave(bytes, "crafted.pt").status(); }

TEST(TorchSave, HandMadeArchivesReadAsTheirPickleSays) {
  Crafted c;
  for (int i = 0; i < 6; ++i) c.storage_bytes[4 * i] = static_cast<char>(i + 1);
  auto plain = ParseTorchSave(Archive(c), "crafted.pt");
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(plain->shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(plain->data, c.storage_bytes);
  // The same archive with its directory in zip64 form.
  const std::string zip64 = Zip({{"t/data.pkl", Pickle(c)}, {"t/data/0", c.storage_bytes}}, true);
  auto wide = ParseTorchSave(zip64, "crafted.pt");
  ASSERT_TRUE(wide.ok()) << wide.status();
  EXPECT_EQ(wide->data, c.storage_bytes);
  // A transposed view: element (i, j) is storage[j * 2 + i].
  Crafted t = c;
  t.sizes = {3, 2};
  t.strides = {1, 3};
  auto view = ParseTorchSave(Archive(t), "crafted.pt");
  ASSERT_TRUE(view.ok()) << view.status();
  EXPECT_EQ(view->data[4], c.storage_bytes[12]);
}

TEST(TorchSave, HandMadeLiesAreRefusedWithWhatIsWrong) {
  const Crafted ok;
  std::vector<std::pair<std::string, std::string>> cases;  // archive, what the message says
  auto with = [&](auto change, const std::string& why) {
    Crafted c = ok;
    change(c);
    cases.emplace_back(Archive(c), why);
  };
  with([](Crafted& c) { c.storage_bytes.resize(20); }, "should hold 6 elements of 4 bytes but has 20");
  with([](Crafted& c) { c.offset = 1; }, "reaches element 6 of a storage of 6 elements");
  with([](Crafted& c) { c.strides = {-3, 1}; }, "negative storage offset or stride");
  with([](Crafted& c) { c.offset = -1; }, "negative storage offset or stride");
  with([](Crafted& c) { c.strides = {3}; }, "2 sizes but 1 strides");
  with([](Crafted& c) { c.sizes = {-2, 3}; }, "is negative");
  with([](Crafted& c) { c.sizes = {1, 1, 1, 1, 1}, c.strides = {1, 1, 1, 1, 1}; }, "rank 5");
  with([](Crafted& c) { c.sizes = {int64_t{1} << 40, int64_t{1} << 40}; }, "more than 2^40 elements");
  with([](Crafted& c) { c.strides = {int64_t{1} << 62, 1}; }, "strides past any storage");
  // Six stored elements broadcast (strides of 0) to 2^36: refused, not gathered.
  with([](Crafted& c) { c.sizes = {int64_t{1} << 18, int64_t{1} << 18}, c.strides = {0, 0}; },
       "elements take 274877906944 bytes, more than 1073741824");
  with([](Crafted& c) { c.numel = int64_t{1} << 50; }, "should hold");
  with([](Crafted& c) { c.storage = "ComplexFloatStorage"; }, "torch.ComplexFloatStorage");
  with([](Crafted& c) { c.extra_opcodes = "h\x07"; }, "GET of memo entry 7, which was never PUT");
  with([](Crafted& c) { c.extra_opcodes = "G"; }, "pickle opcode 0x47");
  with([](Crafted& c) { c.extra_opcodes = std::string(9, '(') + std::string(9, 't'); },
       "tuples nested deeper");
  with([](Crafted& c) { c.extra_opcodes = ")"; }, "2 values on its stack, not one");
  with([](Crafted& c) { c.extra_opcodes = "\x8a\x09"; }, "an integer of 9 bytes");
  with([](Crafted& c) { c.extra_opcodes = "X\xff\xff\xff\x7f"; }, "runs past the end of the pickle");
  {
    Crafted bools = ok;
    bools.storage = "BoolStorage";
    bools.storage_bytes = std::string("\x00\x01\x02\x00\x01\x01", 6);
    cases.emplace_back(Archive(bools), "bool element #2 is the byte 2");
  }
  const std::string pickle = Pickle(ok);
  cases.emplace_back(Zip({{"t/data.pkl", pickle}}), "no entry t/data/0");
  cases.emplace_back(Zip({{"t/data.pkl", pickle}, {"t/data/0", ok.storage_bytes, 8}}), "compressed (method 8)");
  cases.emplace_back(Zip({{"t/data.pkl", pickle}, {"t/data/0", ok.storage_bytes, 0, true}}),
                     "does not match its CRC-32");
  cases.emplace_back(Zip({{"t/data.pkl", pickle}, {"u/data.pkl", pickle}}), "several <name>/data.pkl");
  cases.emplace_back(Zip({{"t/other", pickle}}), "without the <name>/data.pkl");
  cases.emplace_back(Zip({{"t/data.pkl", pickle}, {"t/data/0", ok.storage_bytes}, {"t/byteorder", "big"}}),
                     "byte order \"big\"");
  cases.emplace_back(Zip({{"t/data.pkl", pickle}, {"t/data.pkl", pickle}}), "is in the archive twice");
  {
    std::string moved = Archive(ok);
    const size_t dir = moved.rfind(std::string("PK\x01\x02", 4));
    moved[dir + 42] = '\x7f';  // the first entry's local header offset, now past the end
    cases.emplace_back(moved, "no local header");
  }
  cases.emplace_back(std::string("PK\x03\x04", 4) + std::string(40, '\0'), "no zip end of central directory");
  cases.emplace_back("", "not a zip archive");
  for (const auto& [archive, why] : cases) {
    const absl::Status s = Parsed(archive);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << why << ": " << s;
    EXPECT_THAT(std::string(s.message()), AllOf(HasSubstr("crafted.pt: "), HasSubstr(why)));
  }
}

}  // namespace
}  // namespace cubridge::files
