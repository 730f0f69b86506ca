#include "cuir/files/torch_save.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "cuir/files/files.h"
#include "cuir/files/zip.h"
#include "cuir/ir/status_util.h"

namespace cubridge::files {
namespace {

constexpr char kHow[] = "save one tensor with torch.save(t, path) (PyTorch 1.6 or later)";
// torch.save's pickle of one tensor is a few hundred bytes; a megabyte is not one tensor.
constexpr size_t kMaxPickle = size_t{1} << 20;
// Its values nest three deep (the call's arguments, the storage id, the sizes) and sit in a
// handful of stack and memo slots.
constexpr int kMaxDepth = 8;
constexpr size_t kMaxStack = 4096;
constexpr size_t kMaxMemo = 4096;
constexpr size_t kMaxGlobalName = 256;

absl::Status Refuse(absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(what, "; ", kHow));
}

// A refusal that already says how to save the file (a dtype to convert, a Parameter to detach):
// marked with a payload, so that the reader keeps its own fix instead of adding kHow.
constexpr char kHasItsFix[] = "type.cubridge.dev/torch-save-refusal-with-its-fix";
absl::Status RefuseWithFix(std::string what) {
  absl::Status s = absl::InvalidArgumentError(std::move(what));
  s.SetPayload(kHasItsFix, absl::Cord());
  return s;
}

// The storage classes of the buffer dtypes, by the name torch.save pickles them under.
constexpr std::array<std::pair<absl::string_view, cuir::TensorDType>, 6> kStorages = {{
    {"torch.FloatStorage", cuir::TensorDType::kFloat32},
    {"torch.LongStorage", cuir::TensorDType::kInt64},
    {"torch.IntStorage", cuir::TensorDType::kInt32},
    {"torch.BoolStorage", cuir::TensorDType::kBool},
    {"torch.BFloat16Storage", cuir::TensorDType::kBFloat16},
    {"torch.HalfStorage", cuir::TensorDType::kFloat16},
}};

struct Value;
using ValuePtr = std::shared_ptr<const Value>;

// What the pickle machine computes with. Values never change once made, so the memo and the
// stack share them (no deep copies, whatever the pickle repeats).
struct Value {
  enum class Kind { kMark, kNone, kBool, kInt, kString, kTuple, kGlobal, kDict, kStorage, kTensor };
  Kind kind = Kind::kNone;
  int64_t i = 0;                // bool, int; storage: its element count
  std::string s;                // string; global: "module.name"; storage: its key
  std::vector<ValuePtr> items;  // tuple
  int depth = 0;                // how deep tuples nest in it (a tuple of no tuples: 1)
  // storage and tensor
  cuir::TensorDType dtype = cuir::TensorDType::kInt32;
  // tensor: its storage (a kStorage value), offset, sizes and strides
  ValuePtr storage;
  int64_t offset = 0;
  std::vector<int64_t> sizes, strides;
};

const char* KindName(Value::Kind k) {
  switch (k) {
    case Value::Kind::kMark: return "a mark";
    case Value::Kind::kNone: return "None";
    case Value::Kind::kBool: return "a bool";
    case Value::Kind::kInt: return "an int";
    case Value::Kind::kString: return "a string";
    case Value::Kind::kTuple: return "a tuple";
    case Value::Kind::kGlobal: return "a class or function";
    case Value::Kind::kDict: return "a dict";
    case Value::Kind::kStorage: return "a storage";
    case Value::Kind::kTensor: return "a tensor";
  }
  return "?";
}

ValuePtr Make(Value::Kind kind, int64_t i = 0, std::string s = "") {
  auto v = std::make_shared<Value>();
  v->kind = kind;
  v->i = i;
  v->s = std::move(s);
  return v;
}

class Unpickler {
 public:
  explicit Unpickler(absl::string_view pickle) : p_(pickle) {}

  // The one value the pickle builds, up to STOP.
  absl::StatusOr<ValuePtr> Run() {
    for (;;) {
      if (pos_ >= p_.size()) return Fail("the pickle ends before its STOP opcode");
      const size_t at = pos_;
      const unsigned char op = static_cast<unsigned char>(p_[pos_++]);
      if (op == '.') return Stop();
      if (auto s = Step(op); !s.ok()) {
        return cuir::Prefixed(absl::StrCat("data.pkl byte ", at), s);  // every step fails INVALID_ARGUMENT
      }
    }
  }

 private:
  absl::Status Fail(absl::string_view what) const { return absl::InvalidArgumentError(what); }

  absl::StatusOr<absl::string_view> Take(uint64_t n) {
    if (n > p_.size() - pos_) return Fail("an argument runs past the end of the pickle");
    absl::string_view out = p_.substr(pos_, n);
    pos_ += n;
    return out;
  }
  absl::StatusOr<uint64_t> Le(int n) {
    auto b = Take(n);
    if (!b.ok()) return b.status();
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>((*b)[i]);
    return v;
  }
  absl::StatusOr<std::string> Line() {
    const size_t end = p_.find('\n', pos_);
    if (end == absl::string_view::npos || end - pos_ > kMaxGlobalName) {
      return Fail("a GLOBAL name without its newline (or longer than 256 bytes)");
    }
    std::string out(p_.substr(pos_, end - pos_));
    pos_ = end + 1;
    return out;
  }

  absl::Status Push(ValuePtr v) {
    if (stack_.size() >= kMaxStack) return Fail("more values on the pickle's stack than one tensor needs");
    stack_.push_back(std::move(v));
    return absl::OkStatus();
  }
  absl::StatusOr<ValuePtr> Pop() {
    if (stack_.empty() || stack_.back()->kind == Value::Kind::kMark) {
      return Fail("an opcode takes a value from an empty stack");
    }
    ValuePtr v = std::move(stack_.back());
    stack_.pop_back();
    return v;
  }
  // The two values on top of the stack, the lower first, when they are of kinds `lower` and
  // `upper`; `wrong` otherwise.
  absl::StatusOr<std::pair<ValuePtr, ValuePtr>> PopPair(Value::Kind lower, Value::Kind upper,
                                                       absl::string_view wrong) {
    auto top = Pop();
    if (!top.ok()) return top.status();
    auto below = Pop();
    if (!below.ok()) return below.status();
    if ((*below)->kind != lower || (*top)->kind != upper) return Fail(wrong);
    return std::pair{*std::move(below), *std::move(top)};
  }
  absl::StatusOr<std::vector<ValuePtr>> PopToMark() {
    auto mark = std::find_if(stack_.rbegin(), stack_.rend(),
                             [](const ValuePtr& v) { return v->kind == Value::Kind::kMark; });
    if (mark == stack_.rend()) return Fail("TUPLE without a MARK");
    std::vector<ValuePtr> items(mark.base(), stack_.end());
    stack_.erase(mark.base() - 1, stack_.end());
    return items;
  }
  absl::Status PushTuple(std::vector<ValuePtr> items) {
    auto t = std::make_shared<Value>();
    t->kind = Value::Kind::kTuple;
    t->depth = 1;
    for (const ValuePtr& v : items) t->depth = std::max(t->depth, v->depth + 1);
    if (t->depth > kMaxDepth) return Fail("tuples nested deeper than one tensor's pickle nests them");
    t->items = std::move(items);
    return Push(std::move(t));
  }
  absl::Status PushTupleOf(size_t n) {
    if (stack_.size() < n) return Fail("TUPLE1/2/3 with too few values on the stack");
    std::vector<ValuePtr> items(stack_.end() - static_cast<std::ptrdiff_t>(n), stack_.end());
    for (const ValuePtr& v : items) {
      if (v->kind == Value::Kind::kMark) return Fail("TUPLE1/2/3 across a MARK");
    }
    stack_.resize(stack_.size() - n);
    return PushTuple(std::move(items));
  }
  absl::Status Memo(uint64_t key) {
    if (stack_.empty()) return Fail("PUT with an empty stack");
    if (memo_.size() >= kMaxMemo && !memo_.count(key)) return Fail("more memo entries than one tensor needs");
    memo_[key] = stack_.back();
    return absl::OkStatus();
  }
  absl::Status Recall(uint64_t key) {
    auto it = memo_.find(key);
    if (it == memo_.end()) return Fail(absl::StrCat("GET of memo entry ", key, ", which was never PUT"));
    return Push(it->second);
  }
  // A memo opcode: its n-byte key, then `act` on it.
  absl::Status Keyed(int n, absl::Status (Unpickler::*act)(uint64_t)) {
    auto key = Le(n);
    return key.ok() ? (this->*act)(*key) : key.status();
  }
  absl::Status PushString(absl::StatusOr<uint64_t> len) {
    if (!len.ok()) return len.status();
    auto bytes = Take(*len);
    if (!bytes.ok()) return bytes.status();
    return Push(Make(Value::Kind::kString, 0, std::string(*bytes)));
  }
  absl::Status PushInt(absl::StatusOr<uint64_t> v, int bytes, bool is_signed) {
    if (!v.ok()) return v.status();
    int64_t x = static_cast<int64_t>(*v);
    if (is_signed && bytes < 8 && (*v >> (8 * bytes - 1)) & 1) x -= int64_t{1} << (8 * bytes - 1) << 1;
    return Push(Make(Value::Kind::kInt, x));
  }

  absl::Status Step(unsigned char op) {
    switch (op) {
      case 0x80: {  // PROTO
        auto v = Le(1);
        if (!v.ok()) return v.status();
        if (*v < 2 || *v > 4) return Fail(absl::StrCat("pickle protocol ", *v, " (torch.save writes 2)"));
        return absl::OkStatus();
      }
      case 0x95: return Le(8).status();  // FRAME (protocol 4): a length to read ahead; ignored
      case '(': return Push(Make(Value::Kind::kMark));
      case 'N': return Push(Make(Value::Kind::kNone));
      case 0x88: return Push(Make(Value::Kind::kBool, 1));  // NEWTRUE
      case 0x89: return Push(Make(Value::Kind::kBool, 0));  // NEWFALSE
      case 'K': return PushInt(Le(1), 1, false);           // BININT1
      case 'M': return PushInt(Le(2), 2, false);           // BININT2
      case 'J': return PushInt(Le(4), 4, true);            // BININT
      case 0x8a: {                                          // LONG1
        auto n = Le(1);
        if (!n.ok()) return n.status();
        if (*n > 8) return Fail(absl::StrCat("an integer of ", *n, " bytes (more than 64 bits)"));
        if (*n == 0) return Push(Make(Value::Kind::kInt, 0));
        return PushInt(Le(static_cast<int>(*n)), static_cast<int>(*n), true);
      }
      case 'X': return PushString(Le(4));     // BINUNICODE
      case 0x8c: return PushString(Le(1));    // SHORT_BINUNICODE
      case 0x8d: return PushString(Le(8));    // BINUNICODE8
      case ')': return PushTuple({});         // EMPTY_TUPLE
      case 0x85: return PushTupleOf(1);       // TUPLE1
      case 0x86: return PushTupleOf(2);       // TUPLE2
      case 0x87: return PushTupleOf(3);       // TUPLE3
      case 't': {                             // TUPLE
        auto items = PopToMark();
        if (!items.ok()) return items.status();
        return PushTuple(*std::move(items));
      }
      case '}': return Push(Make(Value::Kind::kDict));  // EMPTY_DICT
      case 'q': return Keyed(1, &Unpickler::Memo);    // BINPUT
      case 'r': return Keyed(4, &Unpickler::Memo);    // LONG_BINPUT
      case 0x94: return Memo(memo_.size());           // MEMOIZE
      case 'h': return Keyed(1, &Unpickler::Recall);  // BINGET
      case 'j': return Keyed(4, &Unpickler::Recall);  // LONG_BINGET
      case 'c': {  // GLOBAL
        auto module = Line();
        if (!module.ok()) return module.status();
        auto name = Line();
        if (!name.ok()) return name.status();
        return Push(Make(Value::Kind::kGlobal, 0, absl::StrCat(*module, ".", *name)));
      }
      case 0x93: {  // STACK_GLOBAL
        auto names = PopPair(Value::Kind::kString, Value::Kind::kString,
                             "STACK_GLOBAL of values that are not strings");
        if (!names.ok()) return names.status();
        return Push(Make(Value::Kind::kGlobal, 0, absl::StrCat(names->first->s, ".", names->second->s)));
      }
      case 'Q': return PersistentLoad();  // BINPERSID
      case 'R': return Reduce();          // REDUCE
      case ']': case 'a': case 'e': case 's': case 'u': case 'b':  // lists, dicts, objects
        return Fail("a list, dict or object with attributes: the file holds something else than "
                    "one plain tensor");
      default:
        return Fail(absl::StrCat("pickle opcode 0x", absl::Hex(op, absl::kZeroPad2),
                                 ", which torch.save does not write for a tensor"));
    }
  }

  // ('storage', torch.<X>Storage, key, location, numel): the storage the tensor views.
  absl::Status PersistentLoad() {
    auto pid = Pop();
    if (!pid.ok()) return pid.status();
    const Value& t = **pid;
    if (t.kind != Value::Kind::kTuple || t.items.size() != 5 ||
        t.items[0]->kind != Value::Kind::kString || t.items[0]->s != "storage") {
      return Fail("a persistent id that is not ('storage', type, key, location, numel)");
    }
    const Value& type = *t.items[1];
    if (type.kind != Value::Kind::kGlobal) return Fail("a storage whose type is not a class");
    auto known = std::find_if(kStorages.begin(), kStorages.end(),
                              [&](const auto& s) { return s.first == type.s; });
    if (known == kStorages.end()) {
      return RefuseWithFix(absl::StrCat(
          "a tensor stored as ", type.s, "; captured tensors are ", cuir::TensorDTypeNames(),
          ": convert it before saving, e.g. torch.save(t.to(torch.float32), path)"));
    }
    if (t.items[2]->kind != Value::Kind::kString || t.items[4]->kind != Value::Kind::kInt ||
        t.items[4]->i < 0) {
      return Fail("a storage id whose key is not a string or whose size is not a count");
    }
    auto storage = std::make_shared<Value>();
    storage->kind = Value::Kind::kStorage;
    storage->i = t.items[4]->i;
    storage->s = t.items[2]->s;
    storage->dtype = known->second;
    return Push(std::move(storage));
  }

  absl::Status Reduce() {
    auto call = PopPair(Value::Kind::kGlobal, Value::Kind::kTuple,
                        "REDUCE of something that is not a call of a class or function");
    if (!call.ok()) return call.status();
    const std::string& fn = call->first->s;
    const std::vector<ValuePtr>& a = call->second->items;
    if (fn == "collections.OrderedDict" && a.empty()) return Push(Make(Value::Kind::kDict));
    if (fn == "torch._utils._rebuild_tensor_v2") return RebuildTensor(a);
    if (fn == "torch._utils._rebuild_parameter") {
      return RefuseWithFix("an nn.Parameter; save the tensor it holds: torch.save(p.detach(), path)");
    }
    return absl::InvalidArgumentError(absl::StrCat(
        "a call of ", fn, ": the file holds something else than one plain tensor (a dict, a "
        "model, a tensor subclass, a sparse or quantized tensor)"));
  }

  static absl::StatusOr<std::vector<int64_t>> Ints(const Value& v, absl::string_view what) {
    if (v.kind != Value::Kind::kTuple) {
      return absl::InvalidArgumentError(absl::StrCat("the tensor's ", what, " is not a tuple"));
    }
    std::vector<int64_t> out;
    for (const ValuePtr& e : v.items) {
      if (e->kind != Value::Kind::kInt) {
        return absl::InvalidArgumentError(absl::StrCat("the tensor's ", what, " hold ", KindName(e->kind)));
      }
      out.push_back(e->i);
    }
    return out;
  }

  // _rebuild_tensor_v2(storage, storage_offset, size, stride, requires_grad, backward_hooks[,
  // metadata]).
  absl::Status RebuildTensor(const std::vector<ValuePtr>& a) {
    if (a.size() != 6 && a.size() != 7) {
      return Fail(absl::StrCat("_rebuild_tensor_v2 with ", a.size(), " arguments (6 or 7 expected)"));
    }
    if (a[0]->kind != Value::Kind::kStorage || a[1]->kind != Value::Kind::kInt ||
        a[4]->kind != Value::Kind::kBool || a[5]->kind != Value::Kind::kDict ||
        (a.size() == 7 && a[6]->kind != Value::Kind::kNone && a[6]->kind != Value::Kind::kDict)) {
      return Fail("_rebuild_tensor_v2 with arguments of other kinds than torch.save writes");
    }
    auto t = std::make_shared<Value>();
    t->kind = Value::Kind::kTensor;
    t->storage = a[0];
    t->dtype = a[0]->dtype;
    t->offset = a[1]->i;
    auto sizes = Ints(*a[2], "sizes");
    if (!sizes.ok()) return sizes.status();
    auto strides = Ints(*a[3], "strides");
    if (!strides.ok()) return strides.status();
    t->sizes = *std::move(sizes);
    t->strides = *std::move(strides);
    return Push(std::move(t));
  }

  absl::StatusOr<ValuePtr> Stop() {
    if (stack_.size() != 1) {
      return Fail(absl::StrCat("the pickle ends with ", stack_.size(), " values on its stack, not one"));
    }
    if (stack_[0]->kind != Value::Kind::kTensor) {
      return absl::InvalidArgumentError(absl::StrCat("the file holds ", KindName(stack_[0]->kind),
                                                     ", not a tensor"));
    }
    return stack_[0];
  }

  absl::string_view p_;
  size_t pos_ = 0;
  std::vector<ValuePtr> stack_;
  std::map<uint64_t, ValuePtr> memo_;
};

// The one `<prefix>/data.pkl` of the archive: its prefix.
absl::StatusOr<std::string> Prefix(const std::map<std::string, ZipEntry>& entries) {
  std::vector<std::string> found;
  for (const auto& [name, unused] : entries) {
    const size_t slash = name.find('/');
    if (slash != std::string::npos && name.substr(slash) == "/data.pkl") found.push_back(name.substr(0, slash + 1));
  }
  if (found.size() != 1) {
    return Refuse(found.empty() ? "a zip archive without the <name>/data.pkl torch.save writes"
                                : "a zip archive with several <name>/data.pkl entries");
  }
  return found[0];
}

absl::StatusOr<absl::string_view> Entry(absl::string_view archive,
                                       const std::map<std::string, ZipEntry>& entries,
                                       const std::string& name, const TorchSaveOptions& o) {
  auto it = entries.find(name);
  if (it == entries.end()) return Refuse(absl::StrCat("no entry ", name, " in the archive"));
  const absl::string_view bytes = EntryBytes(archive, it->second);
  if (o.check_crc && Crc32(bytes) != it->second.crc32) {
    return Refuse(absl::StrCat("entry ", name, " does not match its CRC-32: the file is corrupted"));
  }
  return bytes;
}

// Adds to `at` the product of two non-negative int64s; false past 2^62.
bool AddProduct(int64_t a, int64_t b, int64_t* at) {
  constexpr int64_t kLimit = int64_t{1} << 62;
  if (a != 0 && b > (kLimit - *at) / a) return false;
  *at += a * b;
  return *at <= kLimit;
}

// The view's elements, gathered row-major from the storage's bytes.
absl::StatusOr<cuir::TensorValue> Gather(const Value& t, absl::string_view storage,
                                         const TorchSaveOptions& o) {
  cuir::TensorValue out;
  out.dtype = t.dtype;
  out.shape = t.sizes;
  const std::string what = absl::StrCat("the ", cuir::TensorDTypeName(t.dtype), " tensor");
  auto n = cuir::TensorElements(t.sizes, what);
  if (!n.ok()) return Refuse(n.status().message());
  const Value& s = *t.storage;
  const int64_t elem = cuir::TensorDTypeBytes(t.dtype);
  if (s.i > (int64_t{1} << 40) || static_cast<uint64_t>(s.i * elem) != storage.size()) {
    return Refuse(absl::StrCat("storage ", s.s, " should hold ", s.i, " elements of ", elem,
                               " bytes but has ", storage.size(), " bytes"));
  }
  if (t.strides.size() != t.sizes.size()) {
    return Refuse(absl::StrCat("the tensor has ", t.sizes.size(), " sizes but ", t.strides.size(), " strides"));
  }
  if (t.offset < 0 || std::any_of(t.strides.begin(), t.strides.end(), [](int64_t x) { return x < 0; })) {
    return Refuse("a negative storage offset or stride");
  }
  if (*n > o.max_elements) {
    return RefuseWithFix(absl::StrCat("the tensor has ", *n, " elements, more than ",
                                      o.max_elements, ": save a smaller tensor (or compute its "
                                      "values in the spec from smaller ones)"));
  }
  if (*n * elem > o.max_bytes) {
    return Refuse(absl::StrCat("the tensor's ", *n, " elements take ", *n * elem, " bytes, more than ",
                               o.max_bytes, " (a view that repeats its storage's elements, e.g. an "
                               "expanded tensor, takes them all): save a smaller tensor"));
  }
  if (*n == 0) return out;
  int64_t last = t.offset;  // the highest storage index the view reaches
  for (size_t d = 0; d < t.sizes.size(); ++d) {
    if (!AddProduct(t.sizes[d] - 1, t.strides[d], &last)) return Refuse("strides past any storage");
  }
  if (last >= s.i) {
    return Refuse(absl::StrCat("the view (offset ", t.offset, ") reaches element ", last,
                               " of a storage of ", s.i, " elements"));
  }
  out.data.resize(static_cast<size_t>(*n * elem));
  const size_t rank = t.sizes.size();
  // Runs along the last dimension; the others counted like an odometer.
  const int64_t inner = rank == 0 ? 1 : t.sizes.back();
  const int64_t inner_stride = rank == 0 ? 1 : t.strides.back();
  std::vector<int64_t> index(rank, 0);
  char* dst = out.data.data();
  for (int64_t done = 0; done < *n; done += inner) {
    int64_t from = t.offset;
    for (size_t d = 0; d + 1 < rank; ++d) from += index[d] * t.strides[d];
    if (inner_stride == 1) {
      std::memcpy(dst, storage.data() + from * elem, static_cast<size_t>(inner * elem));
      dst += inner * elem;
    } else {
      for (int64_t i = 0; i < inner; ++i, dst += elem) {
        std::memcpy(dst, storage.data() + (from + i * inner_stride) * elem, static_cast<size_t>(elem));
      }
    }
    for (size_t d = rank > 0 ? rank - 1 : 0; d-- > 0;) {
      if (++index[d] < t.sizes[d]) break;
      index[d] = 0;
    }
  }
  if (auto st = cuir::CheckTensorValue(out, what); !st.ok()) return Refuse(st.message());
  return out;
}

absl::StatusOr<cuir::TensorValue> Parse(absl::string_view bytes, const TorchSaveOptions& o) {
  if (!absl::StartsWith(bytes, "PK\x03\x04")) {
    if (!bytes.empty() && static_cast<unsigned char>(bytes[0]) == 0x80) {
      return Refuse("a pickle without the zip archive around it: the format torch.save wrote before "
                    "PyTorch 1.6, or with _use_new_zipfile_serialization=False");
    }
    return Refuse("not a zip archive, which torch.save writes");
  }
  auto entries = ReadZipEntries(bytes);
  if (!entries.ok()) return Refuse(entries.status().message());
  auto prefix = Prefix(*entries);
  if (!prefix.ok()) return prefix.status();
  if (entries->count(*prefix + "byteorder")) {
    auto order = Entry(bytes, *entries, *prefix + "byteorder", o);
    if (!order.ok()) return order.status();
    if (*order != "little") {
      return Refuse(absl::StrCat("a file saved with byte order \"", *order,
                                 "\"; only little-endian files are read"));
    }
  }
  auto pickle = Entry(bytes, *entries, *prefix + "data.pkl", o);
  if (!pickle.ok()) return pickle.status();
  if (pickle->size() > kMaxPickle) {
    return Refuse(absl::StrCat("a data.pkl of ", pickle->size(), " bytes; one tensor's is a few hundred"));
  }
  auto tensor = Unpickler(*pickle).Run();
  if (!tensor.ok()) {
    if (tensor.status().GetPayload(kHasItsFix).has_value()) return tensor.status();
    return Refuse(tensor.status().message());
  }
  auto storage = Entry(bytes, *entries, absl::StrCat(*prefix, "data/", (*tensor)->storage->s), o);
  if (!storage.ok()) return storage.status();
  return Gather(**tensor, *storage, o);
}

}  // namespace

absl::StatusOr<cuir::TensorValue> ParseTorchSave(absl::string_view bytes, absl::string_view file,
                                                 const TorchSaveOptions& options) {
  auto v = Parse(bytes, options);
  if (!v.ok()) return cuir::Prefixed(file, v.status());
  return v;
}

absl::StatusOr<cuir::TensorValue> ReadTorchSaveFile(const std::string& path,
                                                    const TorchSaveOptions& options) {
  auto bytes = ReadFile(path);
  if (!bytes.ok()) return bytes.status();
  return ParseTorchSave(*bytes, path, options);
}

}  // namespace cubridge::files
