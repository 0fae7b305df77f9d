"""CS336 building blocks shared by the model and the encodings (a leaf: imports only torch)."""
