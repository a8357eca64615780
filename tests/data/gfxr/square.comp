#version 450
// out[i] = mid[i] * mid[i] - pc.bias, for i < pc.n
layout(local_size_x = 64) in;
layout(push_constant) uniform Push { float bias; uint n; } pc;
layout(set = 0, binding = 0) readonly buffer Mid { float m[]; };
layout(set = 0, binding = 1) writeonly buffer Out { float o[]; };
void main() {
    uint i = gl_GlobalInvocationID.x;
    if (i < pc.n) o[i] = m[i] * m[i] - pc.bias;
}
