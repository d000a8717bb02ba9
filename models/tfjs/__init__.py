"""TensorFlow.js graph models (`model.json` and its weight shards) run natively in torch:
`graph` reads the files, `ops` computes TensorFlow's ops as TensorFlow.js does, and
`module` builds a torch module from the nodes an output needs."""
