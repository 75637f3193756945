#pragma once
// The vision tower's own operations as CUDA kernels (vision_kernels.cu), each the device twin of a step of the host
// tower (model/vision_tower.cc, vision_positions.cc) in the same float operations and order where that is cheap. The
// tower's activations: the residual stream and every linear layer's output in fp32, the inputs of the BF16 GEMMs in
// BF16 (model::VisionRounding::linear_inputs_bf16 rounds exactly there). Every kernel is row-wise or works within one
// frame's rows in a fixed order, so a row's result never depends on how many rows a launch has. Every launcher is
// asynchronous on `stream` and throws duet::DeviceError when the launch fails.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace duet::model::cuda {

using bf16 = __nv_bfloat16;

// out[i] = x[i] rounded to BF16 (nearest even), n values.
void launch_round_to_bf16(const float* x, int64_t n, bf16* out, cudaStream_t stream);

// nn.LayerNorm per row of x [rows, width] (plain weight and bias, statistics in fp32, biased variance):
// out = bf16(((x - mean) * rsqrt(var + eps)) * weight + bias).
void launch_layer_norm(const float* x, int64_t rows, int32_t width, const float* weight, const float* bias, float eps,
                       bf16* out, cudaStream_t stream);

// y[r, c] += bias[c] over [rows, width].
void launch_add_bias(float* y, int64_t rows, int32_t width, const float* bias, cudaStream_t stream);
// x[r, c] += y[r, c] + bias[c]: a linear layer's output added to the residual stream.
void launch_add_bias_residual(float* x, const float* y, int64_t rows, int32_t width, const float* bias,
                              cudaStream_t stream);

// out = bf16(gelu(y + bias)) over [rows, width]: the blocks' gelu_pytorch_tanh or the merger's exact erf GELU.
enum class Gelu { tanh, erf };
void launch_bias_gelu(const float* y, int64_t rows, int32_t width, const float* bias, Gelu gelu, bf16* out,
                      cudaStream_t stream);

// x[p, :] += ((T[i0] w0 + T[i1] w1) + T[i2] w2) + T[i3] w3, the four taps of patch p (model::position_taps: index and
// weight [rows, 4] each) into the position table T [*, width] (fp32).
void launch_add_positions(float* x, int64_t rows, int32_t width, const float* table, const int32_t* index,
                          const float* weight, cudaStream_t stream);

// qkv [rows, 3 hidden] (rows [q | k | v], each head-major): adds the bias, then turns q and k of every head by the
// patch's 2-D rotary angles, x' = x cos + rotate_half(x) sin over pairs (i, i + head_dim / 2); cos and sin
// [rows, head_dim] (model::vision_rotary).
void launch_qkv_bias_rotary(float* qkv, int64_t rows, int32_t hidden, int32_t head_dim, const float* bias,
                            const float* cos, const float* sin, cudaStream_t stream);

// Non-causal softmax attention of every head within each frame of `frame_rows` rows (rows = frames * frame_rows),
// scale head_dim^-0.5, q, k and v read from qkv [rows, 3 hidden] in fp32 with fp32 scores and softmax; out
// [rows, hidden] (heads concatenated) rounded to BF16. Tiled (flash style): a block takes a tile of queries of one
// head and walks the frame's keys in tiles in order, with a running max and sum, so it holds no [rows, rows] scores
// and a query's result depends only on its own row and its frame's keys, in a fixed order.
bool frame_attention_supports(int32_t head_dim);  // the head sizes it is compiled for
void launch_frame_attention(const float* qkv, int64_t rows, int64_t frame_rows, int32_t heads, int32_t head_dim,
                            float scale, bf16* out, cudaStream_t stream);

}  // namespace duet::model::cuda
