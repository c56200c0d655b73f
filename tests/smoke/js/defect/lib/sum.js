function sum(values) {
  const seededDefectUnused = 1;
  return values.reduce((total, v) => total + v, 0);
}

module.exports = { sum };
