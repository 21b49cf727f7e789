import Testing
import Tether
