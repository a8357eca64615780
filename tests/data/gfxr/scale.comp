#version 450
// mid[i] = in[i] * FACTOR + pc.bias, for i < pc.n
layout(local_size_x = 64) in;
layout(constant_id = 0) const float FACTOR = 1.0;
layout(push_constant) uniform Push { float bias; uint n; } pc;
layout(set = 0, binding = 0) readonly buffer In { float a[]; };
layout(set = 0, binding = 1) writeonly buffer Mid { float m[]; };
void main() {
    uint i = gl_GlobalInvocationID.x;
    if (i < pc.n) m[i] = a[i] * FACTOR + pc.bias;
}
