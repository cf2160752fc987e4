// Package docs holds the tests of the project's Markdown files: every
// relative link and #anchor resolves, and ```console blocks appear only
// where an integration test runs them. It has no code of its own.
package docs
