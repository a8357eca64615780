#version 450
// One explicit step of the heat equation on an N x N grid: the edges stay at 0.
layout(local_size_x = 8, local_size_y = 8) in;
layout(constant_id = 0) const uint N = 64;
layout(set = 0, binding = 0) readonly buffer U { float u[]; };
layout(set = 0, binding = 1) writeonly buffer V { float v[]; };
void main() {
    uint x = gl_GlobalInvocationID.x, y = gl_GlobalInvocationID.y, i = y * N + x;
    if (x == 0 || y == 0 || x == N - 1 || y == N - 1) { v[i] = 0.0; return; }
    float around = (u[i - 1] + u[i + 1]) + (u[i - N] + u[i + N]);
    v[i] = u[i] + 0.2 * (around - 4.0 * u[i]);
}
