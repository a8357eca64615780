#version 450
// Writes a depth value per texel through a storage image: NVIDIA can store to D32_SFLOAT images,
// lavapipe cannot (no STORAGE_IMAGE feature for the format).
layout(local_size_x = 1) in;
layout(set = 0, binding = 0) uniform writeonly image2D depth;
void main() {
    ivec2 p = ivec2(gl_GlobalInvocationID.xy);
    imageStore(depth, p, vec4(float(p.x + 8 * p.y) / 32.0));
}
