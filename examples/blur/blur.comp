#version 450
// A 2x2 box blur through the sampler: sampling at a texel corner with LINEAR filtering averages the
// four texels around it. Writes one RGBA float32 pixel per invocation.
layout(local_size_x = 8, local_size_y = 8) in;
layout(set = 0, binding = 0) uniform sampler2D image;
layout(set = 0, binding = 1) writeonly buffer Out { vec4 pixels[]; };
void main() {
    ivec2 at = ivec2(gl_GlobalInvocationID.xy);
    ivec2 size = textureSize(image, 0);
    vec2 corner = (vec2(at) + 1.0) / vec2(size);  // between texels at, at + (1, 0), at + (0, 1), at + (1, 1)
    pixels[at.y * size.x + at.x] = textureLod(image, corner, 0.0);
}
