// tosa.add of two float32 [1,4,4,2] inputs: one GRAPH segment, no constants.
module {
  func.func @main(%arg0: tensor<1x4x4x2xf32> {tf_saved_model.index_path = ["input_0"]}, %arg1: tensor<1x4x4x2xf32> {tf_saved_model.index_path = ["input_1"]}) -> (tensor<1x4x4x2xf32> {tf_saved_model.index_path = ["output_0"]}) attributes {tf.entry_function = {inputs = "input_0,input_1", outputs = "output_0"}, tf_saved_model.exported_names = ["serving_default"]} {
    %0 = tosa.add %arg0, %arg1 : (tensor<1x4x4x2xf32>, tensor<1x4x4x2xf32>) -> tensor<1x4x4x2xf32>
    return %0 : tensor<1x4x4x2xf32>
  }
}
