#pragma once
// torchscale's rotation (xPos without its scale): at position n each interleaved pair
// (x[2i], x[2i+1]) of a head is rotated by n * theta_i, theta_i = 10000^(-i / (Dk/2 - 1)) for
// i = 0 .. Dk/2 - 1 (a linspace grid with the endpoint). Not NeoX/LLaMA RoPE: another grid, and
// interleaved rather than half-split pairs.
#include <cstdint>
#include <vector>

namespace retnet {

// theta_i for a head of Dk dims (Dk even), in double.
std::vector<double> rotation_thetas(int64_t Dk);

// Rotates in place x: [B, T, H, Dk] whose rows (b, t) have stride ld (floats); sequence b starts at
// absolute position positions[b] (nullptr: 0). cos_sin: scratch of 2 * T * Dk/2 floats when all
// positions are equal (the table is shared by the batch), else unused.
void rotate_forward(float* x, int64_t ld, int64_t B, int64_t T, int64_t H, int64_t Dk,
                    const std::vector<double>& thetas, const int64_t* positions, float* cos_sin);

// Backward: the rotation is orthogonal, so the gradient is rotated back by the same angle.
// Rotates dx in place by -(position * theta); same arguments as rotate_forward.
void rotate_backward(float* dx, int64_t ld, int64_t B, int64_t T, int64_t H, int64_t Dk,
                     const std::vector<double>& thetas, const int64_t* positions, float* cos_sin);

// The angle table of a pass, computed once and shared by every layer's q and k: row r holds
// [cos(p_r theta_i) for i < Dk/2 | sin(p_r theta_i) for i < Dk/2]. When every sequence starts at
// the same position the table has T rows (row t: position p + t) and the result is 0; otherwise
// B x T rows (row b T + t) and the result is T: the row stride between sequences. `table` holds
// B * T * Dk floats.
int64_t rotation_table(const std::vector<double>& thetas, int64_t B, int64_t T,
                       const int64_t* positions, float* table);
// rotate_forward with the angles read from a rotation_table (`sequence_stride` as it returned).
void rotate_forward_table(float* x, int64_t ld, int64_t B, int64_t T, int64_t H, int64_t Dk,
                          const float* table, int64_t sequence_stride);

}  // namespace retnet
