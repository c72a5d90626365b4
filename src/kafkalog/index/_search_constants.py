"""The constants both forms of the warm/cold index search share (``_search``, plain Python, and
``_kernels``, compiled): the size of the warm section and the two kinds of slot.

They live apart so that the kernels need not import ``_search``, which loads the kernels itself
(lazily, on the switch to compiled lookups): the two would import each other.
"""

WARM_BYTES = 8192
LLB = 0  # largest lower bound: the floor slot
SUB = 1  # smallest upper bound: the ceiling slot
