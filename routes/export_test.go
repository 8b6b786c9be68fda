package routes

// ZeroFields exposes zeroFields to the tests of package routes_test.
func ZeroFields() map[string]string { return zeroFields }
