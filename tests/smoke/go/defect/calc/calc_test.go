package calc

import "testing"

func TestAddSeededDefect(t *testing.T) {
	if got := Add(2, 2); got != 5 {
		t.Fatalf("SEEDED-DEFECT: Add(2, 2) = %d, want 5", got)
	}
}
