const { sum } = require("../lib/sum");

test("SEEDED-DEFECT", () => {
  expect(sum([2, 2])).toBe(5);
});
