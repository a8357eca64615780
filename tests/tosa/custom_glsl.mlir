// Two ML partitions around a com.arm.VulkanCustomShader custom op (GLSL source):
//   tosa.add(input_0, input_1) -> shader "scale_bias_glsl": y = 2x + 1 (GL_ARM_tensors, one invocation per element,
//   workgroup_sizes [4,4,2]) -> tosa.max_pool2d 2x2 stride 2. float32 [1,4,4,2] -> [1,2,2,2].
// model-converter partitions it into three segments: GRAPH, COMPUTE, GRAPH.
module {
  func.func @main(%arg0: tensor<1x4x4x2xf32> {tf_saved_model.index_path = ["input_0"]}, %arg1: tensor<1x4x4x2xf32> {tf_saved_model.index_path = ["input_1"]}) -> (tensor<1x2x2x2xf32> {tf_saved_model.index_path = ["output_0"]}) attributes {tf.entry_function = {inputs = "input_0,input_1", outputs = "output_0"}, tf_saved_model.exported_names = ["serving_default"]} {
    %0 = tosa.add %arg0, %arg1 : (tensor<1x4x4x2xf32>, tensor<1x4x4x2xf32>) -> tensor<1x4x4x2xf32>
    %1 = tosa.custom %0 {domain_name = "com.arm.VulkanCustomShader", implementation_attrs = "{\"entry_point\":\"main\",\"workgroup_sizes\":[4,4,2],\"shader_language\":\"GLSL\",\"shader_code\":\"#version 450\\n#extension GL_ARM_tensors : require\\n// y = 2 * x + 1 over a [1, H, W, C] float tensor; one invocation per element (dispatch H x W x C).\\nlayout(local_size_x = 1, local_size_y = 1, local_size_z = 1) in;\\nlayout(set = 0, binding = 0) uniform tensorARM<float, 4> X;\\nlayout(set = 0, binding = 1) uniform tensorARM<float, 4> Y;\\nvoid main() {\\n    uint h = gl_GlobalInvocationID.x, w = gl_GlobalInvocationID.y, c = gl_GlobalInvocationID.z;\\n    float x;\\n    tensorReadARM(X, uint[](0, h, w, c), x);\\n    tensorWriteARM(Y, uint[](0, h, w, c), 2.0 * x + 1.0);\\n}\\n\",\"input_0_binding\":0,\"input_0_descriptorset\":0,\"input_0_type\":\"Tensor\",\"input_0_vkdescriptortype\":\"VK_DESCRIPTOR_TYPE_TENSOR_ARM\",\"input_0_vkformat\":\"VK_FORMAT_R32_SFLOAT\",\"output_0_binding\":1,\"output_0_descriptorset\":0,\"output_0_type\":\"Tensor\",\"output_0_vkdescriptortype\":\"VK_DESCRIPTOR_TYPE_TENSOR_ARM\",\"output_0_vkformat\":\"VK_FORMAT_R32_SFLOAT\"}", operator_name = "scale_bias_glsl"} : (tensor<1x4x4x2xf32>) -> tensor<1x4x4x2xf32>
    %2 = tosa.max_pool2d %1 {kernel = array<i64: 2, 2>, pad = array<i64: 0, 0, 0, 0>, stride = array<i64: 2, 2>} : (tensor<1x4x4x2xf32>) -> tensor<1x2x2x2xf32>
    return %2 : tensor<1x2x2x2xf32>
  }
}
