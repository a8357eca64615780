// A GRAPH -> COMPUTE -> GRAPH model: a 1x1 convolution (4 -> 8 channels, with bias), then hard-swish as a
// com.arm.VulkanCustomShader custom op (GLSL: the text of hardswish.comp, JSON-escaped; one invocation per
// element, workgroup_sizes [4,4,8]), then a 2x2 max-pool with stride 2. float32 [1,4,4,4] -> [1,2,2,8].
// Weights [8,1,1,4] (OHWI): ((5o + 3i) mod 17 - 8) / 4; bias [8]: (o - 4) / 2.
// model-converter partitions it into three segments: GRAPH, COMPUTE, GRAPH.
module {
  func.func @main(%arg0: tensor<1x4x4x4xf32> {tf_saved_model.index_path = ["input_0"]}) -> (tensor<1x2x2x8xf32> {tf_saved_model.index_path = ["output_0"]}) attributes {tf.entry_function = {inputs = "input_0", outputs = "output_0"}, tf_saved_model.exported_names = ["serving_default"]} {
    %weights = "tosa.const"() {values = dense<[[[[-2.0, -1.25, -0.5, 0.25]]], [[[-0.75, 0.0, 0.75, 1.5]]], [[[0.5, 1.25, 2.0, -1.5]]], [[[1.75, -1.75, -1.0, -0.25]]], [[[-1.25, -0.5, 0.25, 1.0]]], [[[0.0, 0.75, 1.5, -2.0]]], [[[1.25, 2.0, -1.5, -0.75]]], [[[-1.75, -1.0, -0.25, 0.5]]]]> : tensor<8x1x1x4xf32>} : () -> tensor<8x1x1x4xf32>
    %bias = "tosa.const"() {values = dense<[-2.0, -1.5, -1.0, -0.5, 0.0, 0.5, 1.0, 1.5]> : tensor<8xf32>} : () -> tensor<8xf32>
    %izp = "tosa.const"() {values = dense<0.0> : tensor<1xf32>} : () -> tensor<1xf32>
    %wzp = "tosa.const"() {values = dense<0.0> : tensor<1xf32>} : () -> tensor<1xf32>
    %0 = tosa.conv2d %arg0, %weights, %bias, %izp, %wzp {acc_type = f32, dilation = array<i64: 1, 1>, pad = array<i64: 0, 0, 0, 0>, stride = array<i64: 1, 1>} : (tensor<1x4x4x4xf32>, tensor<8x1x1x4xf32>, tensor<8xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<1x4x4x8xf32>
    %1 = tosa.custom %0 {domain_name = "com.arm.VulkanCustomShader", implementation_attrs = "{\"entry_point\": \"main\", \"workgroup_sizes\": [4, 4, 8], \"shader_language\": \"GLSL\", \"shader_code\": \"#version 450\\n#extension GL_ARM_tensors : require\\n// hard-swish, y = x * clamp(x + 3, 0, 6) / 6, over a [1, H, W, C] float tensor; one invocation per element.\\nlayout(local_size_x = 1, local_size_y = 1, local_size_z = 1) in;\\nlayout(set = 0, binding = 0) uniform tensorARM<float, 4> X;\\nlayout(set = 0, binding = 1) uniform tensorARM<float, 4> Y;\\nvoid main() {\\n    uint h = gl_GlobalInvocationID.x, w = gl_GlobalInvocationID.y, c = gl_GlobalInvocationID.z;\\n    float x;\\n    tensorReadARM(X, uint[](0, h, w, c), x);\\n    tensorWriteARM(Y, uint[](0, h, w, c), x * clamp(x + 3.0, 0.0, 6.0) / 6.0);\\n}\\n\", \"input_0_binding\": 0, \"input_0_descriptorset\": 0, \"input_0_type\": \"Tensor\", \"input_0_vkdescriptortype\": \"VK_DESCRIPTOR_TYPE_TENSOR_ARM\", \"input_0_vkformat\": \"VK_FORMAT_R32_SFLOAT\", \"output_0_binding\": 1, \"output_0_descriptorset\": 0, \"output_0_type\": \"Tensor\", \"output_0_vkdescriptortype\": \"VK_DESCRIPTOR_TYPE_TENSOR_ARM\", \"output_0_vkformat\": \"VK_FORMAT_R32_SFLOAT\"}", operator_name = "hardswish"} : (tensor<1x4x4x8xf32>) -> tensor<1x4x4x8xf32>
    %2 = tosa.max_pool2d %1 {kernel = array<i64: 2, 2>, pad = array<i64: 0, 0, 0, 0>, stride = array<i64: 2, 2>} : (tensor<1x4x4x8xf32>) -> tensor<1x2x2x8xf32>
    return %2 : tensor<1x2x2x8xf32>
  }
}
