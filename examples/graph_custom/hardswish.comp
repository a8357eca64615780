#version 450
#extension GL_ARM_tensors : require
// hard-swish, y = x * clamp(x + 3, 0, 6) / 6, over a [1, H, W, C] float tensor; one invocation per element.
layout(local_size_x = 1, local_size_y = 1, local_size_z = 1) in;
layout(set = 0, binding = 0) uniform tensorARM<float, 4> X;
layout(set = 0, binding = 1) uniform tensorARM<float, 4> Y;
void main() {
    uint h = gl_GlobalInvocationID.x, w = gl_GlobalInvocationID.y, c = gl_GlobalInvocationID.z;
    float x;
    tensorReadARM(X, uint[](0, h, w, c), x);
    tensorWriteARM(Y, uint[](0, h, w, c), x * clamp(x + 3.0, 0.0, 6.0) / 6.0);
}
