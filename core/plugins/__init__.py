"""Namespace for kinject's built-in strategy plugins (each in plugins/<method>/)."""
