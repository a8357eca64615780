"""replay: read traces back, re-dispatch frames through the vkcore executor, compare, bisect, report."""
