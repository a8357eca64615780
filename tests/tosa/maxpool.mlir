// tosa.max_pool2d, kernel 2x2, stride 2: float32 [1,4,4,2] -> [1,2,2,2]. One GRAPH segment.
module {
  func.func @main(%arg0: tensor<1x4x4x2xf32> {tf_saved_model.index_path = ["input_0"]}) -> (tensor<1x2x2x2xf32> {tf_saved_model.index_path = ["output_0"]}) attributes {tf.entry_function = {inputs = "input_0", outputs = "output_0"}, tf_saved_model.exported_names = ["serving_default"]} {
    %0 = tosa.max_pool2d %arg0 {kernel = array<i64: 2, 2>, pad = array<i64: 0, 0, 0, 0>, stride = array<i64: 2, 2>} : (tensor<1x4x4x2xf32>) -> tensor<1x2x2x2xf32>
    return %0 : tensor<1x2x2x2xf32>
  }
}
