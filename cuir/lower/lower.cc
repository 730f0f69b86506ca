#include "cuir/lower/lower.h"

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "cuir/ir/dtype.h"
#include "cuir/ir/expr.h"
#include "cuir/lower/codegen.h"
#include "cuir/lower/expert.h"
#include "cuir/lower/plan.h"
#include "cuir/lower/regions.h"

namespace cubridge::lower {
namespace {

constexpr char kAbiRegion[] = "abi";

bool IdentChar(char c) { return absl::ascii_isalnum(c) || c == '_'; }

// Renames identifiers that start with `from` (followed by the end of the identifier or '_') so
// that a lowered kernel's entry points carry the program's kernel name.
std::string RenamePrefix(const std::string& text, const std::string& from, const std::string& to) {
  if (from == to) return text;
  std::string out;
  size_t i = 0;
  while (i < text.size()) {
    const size_t hit = text.find(from, i);
    if (hit == std::string::npos) break;
    const size_t after = hit + from.size();
    const bool starts = hit == 0 || !IdentChar(text[hit - 1]);
    const bool ends = after == text.size() || !IdentChar(text[after]) || text[after] == '_';
    out.append(text, i, hit - i);
    out.append(starts && ends ? to : from);
    i = after;
  }
  out.append(text, i, std::string::npos);
  return out;
}

}  // namespace

// `// @cuir-entry ROLE NAME` lines: the device entry points a module loader looks up.
std::map<std::string, std::string> DeviceEntries(const std::string& source) {
  std::map<std::string, std::string> out;
  for (absl::string_view line : absl::StrSplit(source, '\n')) {
    line = absl::StripLeadingAsciiWhitespace(line);
    if (!absl::ConsumePrefix(&line, "// @cuir-entry ")) continue;
    std::vector<std::string> parts = absl::StrSplit(line, absl::MaxSplits(' ', 1));
    if (parts.size() == 2) out[parts[0]] = std::string(absl::StripAsciiWhitespace(parts[1]));
  }
  return out;
}

std::string NvccGencode(const std::string& target) {
  std::string number = target.substr(3);  // "90a"
  return absl::StrCat("-gencode=arch=compute_", number, ",code=", target);
}

namespace {

// The expert's `// @cuir-arch sm_NN[a]` line: the oldest arch its code runs on, and whether it
// needs that arch's specific target (sm_90a: wgmma, setmaxnreg). None: any arch, generic target.
struct ExpertArch {
  int number = 0;
  bool specific = false;
};

absl::StatusOr<ExpertArch> ReadExpertArch(const Expert& e) {
  ExpertArch out;
  for (absl::string_view line : e.source.lines) {
    line = absl::StripLeadingAsciiWhitespace(line);
    if (!absl::ConsumePrefix(&line, "// @cuir-arch ")) continue;
    line = absl::StripAsciiWhitespace(line);
    out.specific = absl::ConsumeSuffix(&line, "a");
    if (!absl::ConsumePrefix(&line, "sm_") || !absl::SimpleAtoi(line, &out.number)) {
      return absl::FailedPreconditionError(absl::StrCat(
          e.source.filename, ": cannot read its `// @cuir-arch` line (write e.g. `// @cuir-arch sm_90a`)"));
    }
  }
  return out;
}

int ArchNumber(Arch a) { return a == Arch::kSm80 ? 80 : 90; }

// The captured tensors in the launcher's slot order (the plan's, which the codegen numbers).
std::vector<LoweredBuffer> BuffersOf(const LoweringPlan& plan) {
  std::vector<LoweredBuffer> out;
  for (const cuir::Stmt* s : plan.buffers) {
    LoweredBuffer b{s->name, cuir::TensorDTypeName(s->dtype), {}};
    for (const auto& e : s->exprs) b.extents.push_back(e ? cuir::PrintExpr(e) : "?");
    out.push_back(std::move(b));
  }
  return out;
}

// kernel.h says which slot holds which tensor: a caller fills params.buffers from it.
std::string BufferSlotsComment(const std::vector<LoweredBuffer>& buffers) {
  if (buffers.empty()) return "// Captured tensors: none (params.buffers unused).\n";
  std::string text =
      "// Captured tensors, params.buffers[slot]: dtype, and the least size per dimension at the "
      "call's shape\n// (`?`: set by the tensor's values, unchecked).\n";
  for (size_t i = 0; i < buffers.size(); ++i) {
    absl::StrAppend(&text, "//   [", i, "] ", buffers[i].name, ": ", buffers[i].dtype, "[",
                    absl::StrJoin(buffers[i].extents, ", "), "]\n");
  }
  return text;
}

}  // namespace

absl::StatusOr<Arch> ParseArch(const std::string& s) {
  if (s == "sm_80") return Arch::kSm80;
  if (s == "sm_90") return Arch::kSm90;
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown GPU architecture \"", s,
      "\"; accepted values: sm_80 (A100), sm_90 (H100)"));
}

const char* ArchName(Arch a) { return a == Arch::kSm80 ? "sm_80" : "sm_90"; }

absl::StatusOr<LoweredKernel> Lower(const cuir::Program& program,
                                    const cuir::AttentionConfig& config, Arch arch) {
  if (auto st = cuir::ValidateConfig(config); !st.ok()) return st;
  if (auto st = cuir::Validate(program); !st.ok()) return st;
  const cuir::Stmt* expert_decl = cuir::FindDecl(program, cuir::StmtKind::kExpert);
  if (expert_decl == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "kernel `", program.kernel,
        "` names no expert; lowering needs the expert it was lifted from, e.g. `expert "
        "\"fa2_sm80\"`"));
  }
  auto expert = LoadExpert(expert_decl->name, cuir::IsBackward(program));
  if (!expert.ok()) return expert.status();
  auto expert_arch = ReadExpertArch(*expert);
  if (!expert_arch.ok()) return expert_arch.status();
  if (ArchNumber(arch) < expert_arch->number) {
    return absl::FailedPreconditionError(absl::StrCat(
        "kernel `", program.kernel, "` comes from expert \"", expert->name, "\", which needs sm_",
        expert_arch->number, expert_arch->specific ? "a" : "", " or newer; it cannot be lowered for ",
        ArchName(arch), " (transfer from that arch's expert instead)"));
  }
  auto plan = MatchToBase(program, expert->base);
  if (!plan.ok()) return plan.status();
  auto generated = GenerateRegions(*plan, expert->base, *expert);
  if (!generated.ok()) return generated.status();

  LoweredKernel out;
  out.expert = expert->name;
  out.target = expert_arch->specific && ArchNumber(arch) == expert_arch->number
                   ? absl::StrCat(ArchName(arch), "a")
                   : ArchName(arch);
  for (const auto& [name, text] : *generated) {
    if (expert->source.Find(name) == nullptr) {
      return absl::UnimplementedError(absl::StrCat(
          "expert \"", expert->name, "\" has no region `", name, "` (", expert->source.filename,
          "), so the lowering cannot place ", RegionConstruct(name), " of kernel `",
          program.kernel, "`"));
    }
  }
  for (const Region& r : expert->source.regions) {
    (generated->count(r.name) ? out.generated_regions : out.copied_regions).push_back(r.name);
  }
  const Region* abi = expert->source.Find(kAbiRegion);
  if (abi == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "expert \"", expert->name, "\": ", expert->source.filename,
        " has no `abi` region (the launcher declarations every expert must mark)"));
  }

  auto source = InlineLocalIncludes(RenderRegions(expert->source, *generated), expert->dir);
  if (!source.ok()) return source.status();
  const std::string from = absl::StrCat("cubridge_", expert->base.kernel);
  const std::string to = absl::StrCat("cubridge_", program.kernel);
  out.entry_point = to;
  out.cuda_source = absl::StrCat(
      "// Lowered by CuBridge from CuIR kernel `", program.kernel, "` (expert \"", expert->name,
      "\") for ", ArchName(arch), ".\n// Generated regions: ",
      out.generated_regions.empty() ? "none" : absl::StrJoin(out.generated_regions, ", "),
      "; every other region is the expert's code.\n// Lowered for ", config.ToString(),
      "; the launcher accepts any batch, seqlens, dtype (bf16 / fp16) and head dim (64 / 128 / "
      "256), and the head layouts its head mapping serves (its launch plan refuses others).\n",
      RenamePrefix(*source, from, to));
  out.device_entries = DeviceEntries(out.cuda_source);
  if (out.device_entries.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "expert \"", expert->name, "\": ", expert->source.filename,
        " names no `// @cuir-entry ROLE NAME` lines (plan, classify, compact, attention)"));
  }
  // The abi region includes the shared ABI header (common/launch_abi.cuh): inlined, so kernel.h
  // stands alone too.
  auto abi_text = InlineLocalIncludes(expert->source.Body(*abi), expert->dir);
  if (!abi_text.ok()) return abi_text.status();
  out.buffers = BuffersOf(*plan);
  out.launcher_header = absl::StrCat(
      "// Launcher of the CuBridge kernel `", program.kernel, "` (expert \"", expert->name,
      "\", ", ArchName(arch), ", target ", out.target,
      "); link the object compiled from its kernel.cu.\n", BufferSlotsComment(out.buffers),
      RenamePrefix(*abi_text, from, to));
  return out;
}

}  // namespace cubridge::lower
