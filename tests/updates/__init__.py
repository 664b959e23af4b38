"""Tests of the app updating itself: the feed, its signatures, the check, the download and the install."""
