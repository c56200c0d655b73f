package calc

import "testing"

func TestAdd(t *testing.T) {
	if got := Add(2, 3); got != 5 {
		t.Fatalf("Add(2, 3) = %d, want 5", got)
	}
}

func TestLabel(t *testing.T) {
	if got := Label(7); got != "n=7" {
		t.Fatalf("Label(7) = %q", got)
	}
}
