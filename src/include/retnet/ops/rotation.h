#pragma once
// Rotary position embeddings. torchscale's rotation (xPos without its scale): at position n each interleaved pair
// (x[2i], x[2i+1]) of a head is rotated by n * theta_i, theta_i = 10000^(-i / (Dk/2 - 1)) for
// i = 0 .. Dk/2 - 1 (a linspace grid with the endpoint). Not NeoX/LLaMA RoPE: another grid, and
// interleaved rather than half-split pairs; the half-split variant is available too.
#include <cstdint>
#include <vector>

namespace retnet {

// theta_i for a head of Dk dims (Dk even), in double.
std::vector<double> rotation_thetas(int64_t Dk);
// GPT-NeoX's schedule: theta_i = base^(-2i / Dk) for i = 0 .. Dk/2 - 1.
std::vector<double> half_split_rotation_thetas(int64_t Dk, double base);

// Which coordinates form the rotated pairs: torchscale's neighbours (x[2i], x[2i+1]), or
// GPT-NeoX's halves (x[i], x[i + Dk/2]).
enum class RotationPairs { Interleaved, HalfSplit };

// The angle table of a pass, computed once and shared by every layer's q and k (and by the
// backward): row r holds [cos(p_r theta_i) for i < Dk/2 | sin(p_r theta_i) for i < Dk/2]. When
// every sequence starts at the same position (positions[b]; nullptr: all 0) the table has T rows
// (row t: position p + t) and the result is 0; otherwise B x T rows (row b T + t) and the result
// is T: the row stride between sequences. `table` holds B * T * Dk floats.
int64_t rotation_table(const std::vector<double>& thetas, int64_t B, int64_t T,
                       const int64_t* positions, float* table);

// Forward rotates x; Inverse rotates back by the same angle, which is also the backward: the
// rotation is orthogonal, so the gradient of a rotated tensor is the gradient rotated back.
enum class RotationDirection { Forward, Inverse };

// Rotates in place x: [B, T, H, Dk] whose rows (b, t) have stride ld (floats), with the angles
// of a rotation_table (`sequence_stride` as it returned).
void rotate_with_table(float* x, int64_t ld, int64_t B, int64_t T, int64_t H, int64_t Dk,
                       const float* table, int64_t sequence_stride, RotationDirection direction,
                       RotationPairs pairs = RotationPairs::Interleaved);

}  // namespace retnet
