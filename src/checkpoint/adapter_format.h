#pragma once
// The runtime adapter folder (spec/systemone.md, "Runtime adapter"), as `duet adapter` writes it and
// `duet serve --clef` reads it:
//   adapter.safetensors       layers.{i}.{module}.lora_A [r, in] and .lora_B [out, r], BF16
//   joint_head.safetensors, joint_head_config.json    the decision head, unchanged
//   lm_head_rows.safetensors  (optional) lm_head.weight [V, h]: the output embedding the head reads, which must equal
//                             the served base's
//   manifest.json             format, convention, base and merged, rank, every module's shape and rank
//   SHA256SUMS.json           {file name: sha256 hex} of every other file above
#include <array>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace duet::checkpoint::adapter_format {

inline constexpr std::string_view kFactorsFile = "adapter.safetensors";
inline constexpr std::string_view kHeadWeightsFile = "joint_head.safetensors";
inline constexpr std::string_view kHeadConfigFile = "joint_head_config.json";
inline constexpr std::string_view kLmHeadRowsFile = "lm_head_rows.safetensors";
inline constexpr std::string_view kManifestFile = "manifest.json";
inline constexpr std::string_view kChecksumsFile = "SHA256SUMS.json";
inline constexpr std::string_view kLmHeadRowsTensor = "lm_head.weight";

inline constexpr std::string_view kFormat = "duet-adapter/1";
inline constexpr std::string_view kConvention = "y = x W^T + (x A^T) B^T";

// The projections an adapter may cover, named as in the checkpoint (without the layer prefix and ".weight").
inline constexpr std::array<std::string_view, 5> kGdnModules = {"linear_attn.in_proj_qkv", "linear_attn.in_proj_z",
                                                                "linear_attn.in_proj_b", "linear_attn.in_proj_a",
                                                                "linear_attn.out_proj"};
inline constexpr std::array<std::string_view, 4> kAttentionModules = {"self_attn.q_proj", "self_attn.k_proj",
                                                                      "self_attn.v_proj", "self_attn.o_proj"};
inline constexpr std::array<std::string_view, 3> kMlpModules = {"mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"};

// "layers.{layer}.{module}", the key of a module in the manifest; its factors are that plus ".lora_A" / ".lora_B".
std::string module_key(long layer, std::string_view module);

// The files SHA256SUMS.json must list: the four every folder has, and lm_head_rows.safetensors when it has one.
std::vector<std::string_view> signed_files(bool with_lm_head_rows);

// sha256 of each file named, read from `folder` (memory-mapped, so a large file is never held in memory).
std::map<std::string, std::string> checksums_of(const std::string& folder, std::span<const std::string_view> files);
// Writes SHA256SUMS.json for the folder's signed files (with lm_head_rows.safetensors when it is there).
void sign_folder(const std::string& folder);
// Checks every file SHA256SUMS.json lists against its sha256, and that each of `required` is listed; refuses naming
// the file (and both sums) on a mismatch.
void verify_checksums(const std::string& folder, std::span<const std::string_view> required);

}  // namespace duet::checkpoint::adapter_format
