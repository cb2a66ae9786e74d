"""What an experiment is: the config schema and YAML, the data it loads, the method object it builds and the settings a method, a threat and the participation block can take."""
