function sum(values) {
  return values.reduce((total, v) => total + v, 0);
}

module.exports = { sum };
// dirty: an uncommitted change for git status and git diff
