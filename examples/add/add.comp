#version 450
// out[i] = a[i] + b[i] * scale, with the scale in push constants and the workgroup size specialised.
layout(local_size_x_id = 0) in;
layout(constant_id = 1) const float BIAS = 0.0;
layout(push_constant) uniform Push { float scale; uint count; } pc;
layout(set = 0, binding = 0) readonly buffer A { float a[]; };
layout(set = 0, binding = 1) readonly buffer B { float b[]; };
layout(set = 0, binding = 2) buffer Out { float result[]; };

void main() {
    uint i = gl_GlobalInvocationID.x;
    if (i < pc.count) {
        result[i] = result[i] + a[i] + b[i] * pc.scale + BIAS;
    }
}
