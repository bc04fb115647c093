# Sourced by the GPU machine's scripts that run rlxc's Vulkan artifacts (run_real_gpu.sh, bench_real_gpu.sh,
# run_cuda.sh): headless NVIDIA containers fail vkCreateInstance through the GLX ICD, the EGL one works, so
# the Vulkan loader is pointed at NVIDIA's EGL library where there is one (VK_ICD_FILENAMES; unchanged
# where there is none).
EGL=$(ldconfig -p | awk '/libEGL_nvidia.so.0 /{print $NF; exit}')
if [ -n "$EGL" ]; then
  printf '{"file_format_version":"1.0.1","ICD":{"library_path":"%s","api_version":"1.3.0"}}' "$EGL" > /tmp/rlx_egl_icd.json
  export VK_ICD_FILENAMES=/tmp/rlx_egl_icd.json
fi
