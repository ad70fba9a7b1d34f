"""The contract's Python vocabulary: values, errors, durations and proto conversion, shared by every layer."""
