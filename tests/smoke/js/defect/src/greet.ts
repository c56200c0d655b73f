export function greet(name: string): string {
  return `hello, ${name}`;
}

// SEEDED-DEFECT: a string is not a number.
export const answer: number = greet("sandbox");
