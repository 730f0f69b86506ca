#include "cuir/files/zip.h"

#include <array>
#include <optional>

#include "absl/strings/str_cat.h"

namespace cubridge::files {
namespace {

constexpr uint32_t kLocalHeader = 0x04034b50;
constexpr uint32_t kCentralHeader = 0x02014b50;
constexpr uint32_t kEndOfDirectory = 0x06054b50;
constexpr uint32_t kZip64End = 0x06064b50;
constexpr uint32_t kZip64Locator = 0x07064b50;
constexpr uint16_t kZip64Extra = 0x0001;
constexpr uint64_t kEndSize = 22, kLocatorSize = 20, kZip64EndSize = 56;
constexpr uint64_t kCentralSize = 46, kLocalSize = 30;
// An archive of one tensor has its pickle, a version, a byte order and one storage; thousands of
// entries would only make the directory walk long.
constexpr uint64_t kMaxEntries = 4096;

absl::Status Bad(const std::string& what) { return absl::InvalidArgumentError(what); }

// Little-endian fields at checked positions: every read first asks whether it fits.
class Reader {
 public:
  explicit Reader(absl::string_view bytes) : bytes_(bytes) {}
  uint64_t size() const { return bytes_.size(); }
  bool Fits(uint64_t at, uint64_t n) const { return at <= bytes_.size() && n <= bytes_.size() - at; }
  // Only after Fits(at, N).
  uint64_t Le(uint64_t at, int n) const {
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(bytes_[at + i]);
    return v;
  }
  absl::string_view View(uint64_t at, uint64_t n) const { return bytes_.substr(at, n); }

 private:
  absl::string_view bytes_;
};

struct Directory {
  uint64_t entries = 0, size = 0, offset = 0;
};

// The end of central directory record: the last one whose comment reaches the archive's end (a
// comment is at most 65535 bytes, so it is in the archive's last 64 KiB + 22 bytes).
std::optional<uint64_t> FindEnd(const Reader& r) {
  if (r.size() < kEndSize) return std::nullopt;
  const uint64_t last = r.size() - kEndSize;
  const uint64_t first = last > 0xffff ? last - 0xffff : 0;
  for (uint64_t at = last + 1; at-- > first;) {
    if (r.Le(at, 4) == kEndOfDirectory && at + kEndSize + r.Le(at + 20, 2) == r.size()) return at;
  }
  return std::nullopt;
}

absl::StatusOr<Directory> ReadDirectory(const Reader& r) {
  const auto end = FindEnd(r);
  if (!end) {
    return Bad(absl::StrCat("no zip end of central directory record in its ", r.size(),
                            " bytes (truncated, or not a zip archive)"));
  }
  if (r.Le(*end + 4, 2) != 0 || r.Le(*end + 6, 2) != 0) {
    return Bad("a zip archive split over several disks");
  }
  Directory d{r.Le(*end + 10, 2), r.Le(*end + 12, 4), r.Le(*end + 16, 4)};
  if (d.entries == 0xffff || d.size == 0xffffffff || d.offset == 0xffffffff) {
    // zip64: the locator sits right before the end record and names the zip64 end record.
    if (*end < kLocatorSize || r.Le(*end - kLocatorSize, 4) != kZip64Locator) {
      return Bad("a zip64 archive without its zip64 end of central directory locator");
    }
    const uint64_t at = r.Le(*end - kLocatorSize + 8, 8);
    if (!r.Fits(at, kZip64EndSize) || r.Le(at, 4) != kZip64End) {
      return Bad(absl::StrCat("the zip64 end of central directory record at byte ", at,
                              " is missing or leaves the archive"));
    }
    d = {r.Le(at + 32, 8), r.Le(at + 40, 8), r.Le(at + 48, 8)};
  }
  if (!r.Fits(d.offset, d.size)) {
    return Bad(absl::StrCat("the central directory (", d.size, " bytes at byte ", d.offset,
                            ") leaves the archive of ", r.size(), " bytes"));
  }
  if (d.entries > kMaxEntries) {
    return Bad(absl::StrCat("the archive has ", d.entries, " entries; a file of one tensor has a few"));
  }
  return d;
}

// The zip64 extra field replaces, in this order, each of the 32-bit fields that is all ones.
absl::Status ApplyZip64(const Reader& r, uint64_t extra_at, uint64_t extra_len, const std::string& name,
                        uint64_t* size, uint64_t* compressed, uint64_t* offset) {
  for (uint64_t at = extra_at; at + 4 <= extra_at + extra_len;) {
    const uint64_t id = r.Le(at, 2), len = r.Le(at + 2, 2);
    if (at + 4 + len > extra_at + extra_len) {
      return Bad(absl::StrCat("entry ", name, ": an extra field leaves its header"));
    }
    if (id == kZip64Extra) {
      uint64_t field = at + 4;
      for (uint64_t* v : {size, compressed, offset}) {
        if (*v != 0xffffffff) continue;
        if (field + 8 > at + 4 + len) {
          return Bad(absl::StrCat("entry ", name, ": its zip64 extra field is too short"));
        }
        *v = r.Le(field, 8);
        field += 8;
      }
      return absl::OkStatus();
    }
    at += 4 + len;
  }
  if (*size == 0xffffffff || *compressed == 0xffffffff || *offset == 0xffffffff) {
    return Bad(absl::StrCat("entry ", name, ": a zip64 size or offset without its zip64 extra field"));
  }
  return absl::OkStatus();
}

// One central directory header at `at`: the entry, checked against its local header; `at`
// moves to the next header.
absl::StatusOr<std::pair<std::string, ZipEntry>> ReadEntry(const Reader& r, const Directory& d,
                                                           uint64_t* at) {
  const uint64_t end = d.offset + d.size;
  if (*at + kCentralSize > end || r.Le(*at, 4) != kCentralHeader) {
    return Bad(absl::StrCat("the central directory header at byte ", *at, " is missing or cut short"));
  }
  const uint64_t flags = r.Le(*at + 8, 2), method = r.Le(*at + 10, 2);
  const uint64_t name_len = r.Le(*at + 28, 2), extra_len = r.Le(*at + 30, 2),
                 comment_len = r.Le(*at + 32, 2);
  if (*at + kCentralSize + name_len + extra_len + comment_len > end) {
    return Bad(absl::StrCat("the central directory header at byte ", *at, " leaves the directory"));
  }
  const std::string name(r.View(*at + kCentralSize, name_len));
  ZipEntry e;
  e.crc32 = static_cast<uint32_t>(r.Le(*at + 16, 4));
  uint64_t compressed = r.Le(*at + 20, 4), size = r.Le(*at + 24, 4), offset = r.Le(*at + 42, 4);
  if (auto s = ApplyZip64(r, *at + kCentralSize + name_len, extra_len, name, &size, &compressed, &offset);
      !s.ok()) {
    return s;
  }
  *at += kCentralSize + name_len + extra_len + comment_len;
  if (flags & 1) return Bad(absl::StrCat("entry ", name, " is encrypted"));
  if (method != 0 || compressed != size) {
    return Bad(absl::StrCat("entry ", name, " is compressed (method ", method,
                            "); torch.save stores its entries uncompressed, so the file was "
                            "repacked after it was saved"));
  }
  if (!r.Fits(offset, kLocalSize) || r.Le(offset, 4) != kLocalHeader) {
    return Bad(absl::StrCat("entry ", name, ": no local header at byte ", offset));
  }
  const uint64_t local_name = r.Le(offset + 26, 2), local_extra = r.Le(offset + 28, 2);
  if (!r.Fits(offset + kLocalSize, local_name + local_extra) ||
      r.View(offset + kLocalSize, local_name) != name) {
    return Bad(absl::StrCat("entry ", name, ": its local header at byte ", offset,
                            " does not name it"));
  }
  e.data_offset = offset + kLocalSize + local_name + local_extra;
  e.size = size;
  if (!r.Fits(e.data_offset, e.size)) {
    return Bad(absl::StrCat("entry ", name, ": its ", e.size, " bytes at byte ", e.data_offset,
                            " leave the archive of ", r.size(), " bytes (truncated?)"));
  }
  return std::pair{name, e};
}

}  // namespace

absl::StatusOr<std::map<std::string, ZipEntry>> ReadZipEntries(absl::string_view archive) {
  const Reader r(archive);
  auto d = ReadDirectory(r);
  if (!d.ok()) return d.status();
  std::map<std::string, ZipEntry> out;
  uint64_t at = d->offset;
  for (uint64_t i = 0; i < d->entries; ++i) {
    auto entry = ReadEntry(r, *d, &at);
    if (!entry.ok()) return entry.status();
    if (!out.emplace(entry->first, entry->second).second) {
      return Bad(absl::StrCat("entry ", entry->first, " is in the archive twice"));
    }
  }
  return out;
}

absl::string_view EntryBytes(absl::string_view archive, const ZipEntry& entry) {
  return archive.substr(entry.data_offset, entry.size);
}

uint32_t Crc32(absl::string_view bytes) {
  static const std::array<uint32_t, 256> table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xedb88320u ^ (c >> 1) : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  uint32_t crc = 0xffffffffu;
  for (char ch : bytes) crc = table[(crc ^ static_cast<unsigned char>(ch)) & 0xff] ^ (crc >> 8);
  return crc ^ 0xffffffffu;
}

}  // namespace cubridge::files
