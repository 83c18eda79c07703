// Package selfcheck holds only tests: the suite checking itself against
// locks and stores broken on purpose (mutation tests), fault-free runs (no
// false alarms), servers that die mid-run and Lockers that panic or never
// return. They are apart from package suite's tests so that each package's
// test binary stays within go test's default timeout.
package selfcheck
