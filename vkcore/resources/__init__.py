"""Resources on the device: buffers, images, tensors and the files they load from and write to (DDS, PNG, NPY), formats, staging."""
