#version 450
// Every fragment writes its colour into a storage buffer: no colour attachment needed.
layout(set = 0, binding = 0) buffer Out { vec4 pixels[]; };
layout(push_constant) uniform P { vec2 size; } p;
void main() {
    ivec2 at = ivec2(gl_FragCoord.xy);
    vec2 uv = gl_FragCoord.xy / p.size;
    pixels[at.y * int(p.size.x) + at.x] = vec4(uv, 0.5 + 0.5 * sin(10.0 * uv.x * uv.y), 1.0);
}
