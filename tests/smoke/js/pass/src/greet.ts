export function greet(name: string): string {
  return `hello, ${name}`;
}

export const answer: number = greet("sandbox").length;
