"""The data graph: vertex slots and ids, label-sorted neighbour lists, the packed memory
array (on NumPy or CuPy), and the sorted-set helpers they share."""
