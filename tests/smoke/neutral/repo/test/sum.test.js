const { sum } = require("../lib/sum");

describe("sum", () => {
  test("adds", () => {
    expect(sum([1, 2, 3])).toBe(6);
  });
  test("formats a date in UTC", () => {
    expect(new Date(Date.UTC(2026, 0, 1)).toISOString()).toBe("2026-01-01T00:00:00.000Z");
  });
});
