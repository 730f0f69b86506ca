// Reading the entries of a zip archive held in memory: the central directory (zip64 too) and
// each entry's stored bytes, every length and offset checked against the archive. Only what the
// archives torch.save writes need: one disk, no encryption, entries stored uncompressed.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace cubridge::files {

struct ZipEntry {
  uint64_t data_offset = 0;  // where the entry's bytes start in the archive
  uint64_t size = 0;         // how many bytes (stored: compressed size == size)
  uint32_t crc32 = 0;        // as the central directory gives it
};

// Every entry of `archive` by name. INVALID_ARGUMENT saying what is wrong (no end of central
// directory record, a length that leaves the archive, a compressed or encrypted entry, a name
// given twice, ...); the message does not name the file, the caller does.
absl::StatusOr<std::map<std::string, ZipEntry>> ReadZipEntries(absl::string_view archive);

// The bytes of `entry` (a view into `archive`, which ReadZipEntries checked it lies in).
absl::string_view EntryBytes(absl::string_view archive, const ZipEntry& entry);

// CRC-32 as zip computes it (polynomial 0xEDB88320, reflected, initial and final XOR ~0).
uint32_t Crc32(absl::string_view bytes);

}  // namespace cubridge::files
