// Package calc is the Sunaba smoke project (go, seeded defects).
package calc

// Add returns a + b.
func Add(a, b int) int {
	return a + b
}

// Twice has a self-assignment: go vet's `assign` check (not in go test's
// vet subset, so go test reports the failing test instead).
func Twice(n int) int {
	n = n
	return 2 * n
}
