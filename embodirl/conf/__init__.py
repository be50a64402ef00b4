"""embodirl's config groups (shipped as the package ``embodirl.conf``); importing it registers the
resolvers the YAML files use (:mod:`embodirl.runtime.resolvers`)."""

import embodirl.runtime.resolvers  # noqa: F401
