#version 450
#extension GL_ARM_tensors : require
#extension GL_EXT_shader_explicit_arithmetic_types_int8 : require
// y[r, c] = clamp((x[r, c] * w[c] + 2^(SHIFT-1)) >> SHIFT, -128, 127): an int8 tensor scaled per column
// (one int8 weight per column), rounded half up by the shift and saturated back to int8.
layout(local_size_x = 16, local_size_y = 1) in;
layout(constant_id = 0) const int SHIFT = 5;
layout(set = 0, binding = 0) uniform tensorARM<int8_t, 2> X;  // [rows, 16]
layout(set = 0, binding = 1) uniform tensorARM<int8_t, 1> W;  // [16]
layout(set = 0, binding = 2) uniform tensorARM<int8_t, 2> Y;  // [rows, 16]
void main() {
    uint c = gl_GlobalInvocationID.x, r = gl_GlobalInvocationID.y;
    int8_t x, w;
    tensorReadARM(X, uint[](r, c), x);
    tensorReadARM(W, uint[](c), w);
    int y = (int(x) * int(w) + (1 << (SHIFT - 1))) >> SHIFT;
    tensorWriteARM(Y, uint[](r, c), int8_t(clamp(y, -128, 127)));
}
