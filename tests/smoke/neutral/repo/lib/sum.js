function sum(values) {
  return values.reduce((total, v) => total + v, 0);
}

module.exports = { sum };
