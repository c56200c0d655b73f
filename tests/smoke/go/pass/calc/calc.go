// Package calc is the Sunaba smoke project (go, passing).
package calc

import "fmt"

// Add returns a + b.
func Add(a, b int) int {
	return a + b
}

// Label formats n.
func Label(n int) string {
	return fmt.Sprintf("n=%d", n)
}
